// The SDK's frames against the protocol's test vectors (docs/vectors): every MessagePack
// vector decodes to its value and its value encodes to exactly its bytes; and the decoders
// refuse what a hostile peer could send.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

import * as f from '../dist/frames.js';
import { joinFrames } from '../dist/link.js';
import { decode, encode, MsgpackError } from '../dist/msgpack.js';

const VECTORS = fileURLToPath(new URL('../../../docs/vectors/', import.meta.url));

const hex = (s) => Uint8Array.from(s.replace(/\s/g, '').match(/../g), (h) => parseInt(h, 16));
// u64s past 2^53 as bigint: JSON.parse alone would round them.
const parse = (text) =>
  JSON.parse(text.replace(/: (\d{16,})/g, ': "big:$1"'), (_, v) =>
    typeof v === 'string' && v.startsWith('big:') ? BigInt(v.slice(4)) : v,
  );
const num = (v) => (typeof v === 'bigint' && v <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(v) : v);

function vectors() {
  return readdirSync(VECTORS)
    .filter((n) => n.endsWith('.json'))
    .map((n) => ({ name: n.slice(0, -5), ...parse(readFileSync(VECTORS + n, 'utf8')) }))
    .filter((v) => v.codec === 'msgpack');
}

function envelopeOf(v) {
  return {
    id: num(v.id),
    from: v.from,
    to: { type: v.to.type, name: v.to.name },
    kind: v.kind,
    priority: v.priority,
    ttlMs: v.ttl_ms,
    timestampUs: num(v.timestamp_us),
    correlation: v.correlation === null || v.correlation === undefined ? null : num(v.correlation),
    headers: v.headers,
    body: new Uint8Array(Buffer.from(v.body, 'base64')),
  };
}

function encodeVector(v) {
  const x = v.value;
  switch (v.frame_type) {
    case 'hello':
      return f.encodeHello({ agentId: x.agent_id, role: x.role, capabilities: x.capabilities, token: x.auth_token,
        maxFrameSize: x.max_frame_size, codecs: x.codecs });
    case 'envelope':
      return f.encodeEnvelope(envelopeOf(x));
    case 'subscribe':
      return f.textFrame(f.FrameType.Subscribe, x.topic);
    case 'unsubscribe':
      return f.textFrame(f.FrameType.Unsubscribe, x.topic);
    case 'consume':
      return f.consumeFrame(x.queue, x.credit);
    case 'ack':
      return f.ackFrame(x.task);
    case 'nack':
      return f.nackFrame(x.task, x.delay_ms);
    case 'heartbeat':
      return f.heartbeatFrame(num(x.seq), num(x.timestamp_us));
    case 'goodbye':
      return f.goodbyeFrame(x.code, x.reason);
    default:
      return null; // welcome and reject: the agent only reads them
  }
}

function only(bytes) {
  const r = new f.FrameReader(1 << 24);
  r.push(bytes);
  const frame = r.next();
  assert.ok(frame);
  assert.equal(r.buffered, 0);
  return frame;
}

test('every MessagePack vector the agent writes encodes to exactly its bytes', () => {
  let n = 0;
  for (const v of vectors()) {
    const out = encodeVector(v);
    if (out === null) continue;
    assert.equal(Buffer.from(out).toString('hex'), Buffer.from(hex(readFileSync(VECTORS + v.name + '.hex', 'utf8'))).toString('hex'), v.name);
    n += 1;
  }
  assert.ok(n >= 20, `${n} vectors encoded`);
});

test('every MessagePack vector the agent reads decodes to its value', () => {
  let n = 0;
  for (const v of vectors()) {
    const frame = only(hex(readFileSync(VECTORS + v.name + '.hex', 'utf8')));
    const x = v.value;
    if (v.frame_type === 'envelope') {
      assert.equal(frame.type, f.FrameType.Envelope);
      const got = f.decodeEnvelope(frame.payload);
      const want = envelopeOf(x);
      assert.deepEqual({ ...got, headers: { ...got.headers } }, want, v.name);
      n += 1;
    } else if (v.frame_type === 'welcome') {
      assert.deepEqual(f.decodeWelcome(frame.payload), {
        version: x.version, codec: x.codec, sessionId: num(x.session_id), maxFrameSize: x.max_frame_size,
        heartbeatIntervalMs: x.heartbeat_interval_ms, capabilities: x.capabilities,
      });
      n += 1;
    } else if (v.frame_type === 'reject') {
      assert.deepEqual(f.decodeReject(frame.payload), { code: x.code, reason: x.reason });
      n += 1;
    } else if (v.frame_type === 'goodbye') {
      assert.deepEqual(f.decodeGoodbye(frame), { code: x.code, reason: x.reason });
      n += 1;
    }
  }
  assert.ok(n >= 15, `${n} vectors decoded`);
});

test('the frame reader cuts frames from any chunking and refuses an oversized one from its prefix', () => {
  const a = f.textFrame(f.FrameType.Subscribe, 'news');
  const b = f.heartbeatFrame(7, 1000);
  const all = new Uint8Array([...a, ...b]);
  for (let cut = 0; cut <= all.length; cut++) {
    const r = new f.FrameReader(1024);
    r.push(all.subarray(0, cut));
    const got = [];
    for (let x = r.next(); x; x = r.next()) got.push(x.type);
    r.push(all.subarray(cut));
    for (let x = r.next(); x; x = r.next()) got.push(x.type);
    assert.deepEqual(got, [f.FrameType.Subscribe, f.FrameType.Heartbeat], `cut at ${cut}`);
    r.finish();
  }
  const r = new f.FrameReader(8);
  r.push(new Uint8Array([0, 0, 1, 0])); // announces 256 bytes, none sent
  assert.throws(() => r.next(), (e) => e instanceof f.FrameError && e.code === 2);
  const empty = new f.FrameReader(8);
  empty.push(new Uint8Array([0, 0, 0, 0]));
  assert.throws(() => empty.next(), (e) => e instanceof f.FrameError && e.code === 3);
  const partial = new f.FrameReader(8);
  partial.push(new Uint8Array([0, 0, 0, 2, 0x30]));
  assert.equal(partial.next(), null);
  assert.throws(() => partial.finish(), (e) => e.code === 3);
});

test('the MessagePack reader refuses lengths past the bytes it has and deep nesting', () => {
  // An array announcing 2^32-1 items in 5 bytes: refused before anything is allocated.
  assert.throws(() => decode(new Uint8Array([0xdd, 0xff, 0xff, 0xff, 0xff])), MsgpackError);
  assert.throws(() => decode(new Uint8Array([0xc6, 0x7f, 0xff, 0xff, 0xff, 1])), MsgpackError);
  assert.throws(() => decode(new Uint8Array(100).fill(0x91)), /deeper/);
  assert.throws(() => decode(new Uint8Array([0xa2, 0xff, 0xfe])), /UTF-8/);
  assert.throws(() => decode(new Uint8Array([0x01, 0x02])), /after the value/);
  assert.equal(decode(encode(2n ** 64n - 1n)), 2n ** 64n - 1n);
  assert.equal(decode(encode(2 ** 40)), 2 ** 40);
});

test('an envelope that lies about its fields is malformed, and a header named __proto__ stays a header', () => {
  const good = f.encodeEnvelope({ id: 1, from: 'a', to: { type: 'agent', name: 'b' }, kind: 'event', priority: 'low',
    ttlMs: 0, timestampUs: 0, correlation: null, headers: { __proto__x: '1' }, body: new Uint8Array([1]) });
  assert.equal(f.decodeEnvelope(good.subarray(5)).priority, 'low');
  const badKind = encode([1, 'a', [0, 'b'], 9, 2, 0, 0, null, new Map(), new Uint8Array()]);
  assert.throws(() => f.decodeEnvelope(badKind), (e) => e instanceof f.FrameError && e.code === 3);
  const nine = encode([1, 'a', [0, 'b'], 7, 2, 0, 0, null, new Map()]);
  assert.throws(() => f.decodeEnvelope(nine), /array of 10/);
  const proto = encode([1, 'a', [0, 'b'], 7, 2, 0, 0, null, new Map([['__proto__', 'x']]), new Uint8Array()]);
  const env = f.decodeEnvelope(proto);
  assert.equal(Object.getPrototypeOf(env.headers), Object.prototype);
  assert.equal(Object.keys(env.headers).join(), '__proto__');
  assert.equal(env.headers['__proto__'], 'x');
});

test('joinFrames joins frames in order into runs of at most the limit; a larger one runs alone', () => {
  const frame = (n, fill) => new Uint8Array(n).fill(fill);
  const runs = joinFrames([frame(40, 1), frame(50, 2), frame(30, 3), frame(200, 4), frame(10, 5)], 100);
  assert.deepEqual(runs.map((r) => r.length), [90, 30, 200, 10]);
  assert.deepEqual([...runs[0].slice(38, 42)], [1, 1, 2, 2]);
  assert.deepEqual(joinFrames([], 100), []);
  const all = runs.flatMap((r) => [...r]);
  assert.deepEqual(all, [frame(40, 1), frame(50, 2), frame(30, 3), frame(200, 4), frame(10, 5)].flatMap((r) => [...r]));
});
