'use strict';
// The Node API against a real hub on loopback (agentwire.Hub: the Rust hub in this process,
// real QUIC, HTTP/2, WebSocket and Unix sockets).
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const agentwire = require('..');

function echo(agent) {
  return (async () => {
    for await (const msg of agent) {
      if (msg.isRequest) await msg.reply(msg.body);
    }
  })();
}

test('request/reply over every transport', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'agentwire-'));
  const listen = ['quic://127.0.0.1:0', 'h2://127.0.0.1:0', 'wss://127.0.0.1:0', `unix://${dir}/hub.sock`];
  const hub = await agentwire.Hub.start({ listen });
  try {
    assert.equal(hub.urls.length, 4);
    const worker = await agentwire.connect({ hub: hub.url, id: 'worker', pin: hub.pin });
    const serving = echo(worker);
    for (const url of hub.urls) {
      const boss = await agentwire.connect({ hub: url, id: 'boss', caPem: hub.caPem });
      const reply = await boss.request('worker', Buffer.from('ping'), { timeoutMs: 5000, headers: { trace: 't1' } });
      assert.deepEqual(reply.body, Buffer.from('ping'));
      assert.equal(reply.sender, 'worker');
      assert.equal(reply.kind, 'response');
      assert.equal(reply.text, 'ping');
      await boss.close();
    }
    await worker.close();
    await serving;
  } finally {
    hub.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('2,000 concurrent requests from one agent complete without error', async () => {
  const hub = await agentwire.Hub.start();
  try {
    const workers = await Promise.all([0, 1, 2, 3].map((i) => agentwire.connect({ hub: hub.url, id: `w${i}`, pin: hub.pin })));
    const serving = workers.map(echo);
    const boss = await agentwire.connect({ hub: hub.url, id: 'boss', pin: hub.pin });
    const bodies = Array.from({ length: 2000 }, (_, i) => `task-${i}`.repeat(64));
    const replies = await Promise.all(bodies.map((b, i) => boss.request(`w${i % 4}`, b, { timeoutMs: 30000 })));
    assert.deepEqual(replies.map((r) => r.text), bodies);
    assert.ok(boss.stats().messages_sent >= 2000);
    await boss.close();
    await Promise.all(workers.map((w) => w.close()));
    await Promise.all(serving);
  } finally {
    hub.close();
  }
});

test('topics, events, priorities and headers', async () => {
  const hub = await agentwire.Hub.start();
  try {
    const listener = await agentwire.connect({ hub: hub.url, id: 'listener', pin: hub.pin });
    const speaker = await agentwire.connect({ hub: hub.url, id: 'speaker', pin: hub.pin });
    await listener.subscribe('news');
    await new Promise((r) => setTimeout(r, 100));
    await speaker.publish('news', 'hello');
    let msg = await listener.recv();
    assert.deepEqual([msg.kind, msg.to, msg.text], ['event', 'topic:news', 'hello']);
    await speaker.send('listener', new Uint8Array([1, 2, 3]), { priority: 'critical', headers: { a: 'b' } });
    msg = await listener.recv();
    assert.deepEqual([msg.priority, msg.headers, [...msg.body]], ['critical', { a: 'b' }, [1, 2, 3]]);
    await assert.rejects(msg.reply('not a request'), agentwire.ConfigError);
    await listener.close();
    await speaker.close();
  } finally {
    hub.close();
  }
});

test('publishMany delivers every body, or none when one is too large', async () => {
  const hub = await agentwire.Hub.start();
  try {
    const listener = await agentwire.connect({ hub: hub.url, id: 'listener', pin: hub.pin });
    const speaker = await agentwire.connect({ hub: hub.url, id: 'speaker', pin: hub.pin });
    await listener.subscribe('news');
    await new Promise((r) => setTimeout(r, 100));
    const bodies = Array.from({ length: 50 }, (_, i) => `n${i}`);
    const ids = await speaker.publishMany('news', bodies);
    assert.equal(ids.length, 50);
    assert.equal(new Set(ids).size, 50);
    const got = new Map();
    while (got.size < 50) {
      const msg = await listener.recv();
      got.set(msg.id, msg.text);
    }
    assert.deepEqual(got, new Map(ids.map((id, i) => [id, bodies[i]])));
    await assert.rejects(speaker.publishMany('news', ['small', Buffer.alloc(17 << 20)]), agentwire.TooLargeError);
    await assert.rejects(speaker.publishMany('news', 'one body'), agentwire.ConfigError);
    await assert.rejects(speaker.publishMany('news', [12]), agentwire.ConfigError);
    assert.deepEqual(await speaker.publishMany('news', []), []);
    await speaker.publish('news', 'after');
    assert.equal((await listener.recv()).text, 'after');
    await listener.close();
    await speaker.close();
  } finally {
    hub.close();
  }
});

test('durable queue: enqueue, duplicates, consume, ack, nack', async () => {
  const store = fs.mkdtempSync(path.join(os.tmpdir(), 'agentwire-store-'));
  const hub = await agentwire.Hub.start({ store });
  try {
    const boss = await agentwire.connect({ hub: hub.url, id: 'boss', pin: hub.pin });
    const worker = await agentwire.connect({ hub: hub.url, id: 'worker', pin: hub.pin });
    const first = await boss.enqueue('jobs', 't1', { producerId: 'p1' });
    assert.deepEqual(await boss.enqueue('jobs', 't1', { producerId: 'p1' }), { task: first.task, duplicate: true });
    await boss.enqueue('jobs', 't2');
    await worker.consume('jobs', { credit: 2 });
    const got = [await worker.recv(), await worker.recv()];
    assert.deepEqual(got.map((m) => m.text).sort(), ['t1', 't2']);
    assert.ok(got.every((m) => m.queue === 'jobs' && m.attempt === 1));
    await worker.ack(got[0]);
    await worker.nack(got[1], { delayMs: 0 });
    const again = await worker.recv();
    assert.deepEqual([again.text, again.attempt], [got[1].text, 2]);
    await worker.ack(again.id);
    await worker.stopConsuming('jobs');
    // The stop travels like any frame: wait until the hub has taken it.
    for (let i = 0; i < 100 && (await boss.queueStats('jobs')).consumers !== 0; i++) {
      await new Promise((r) => setTimeout(r, 20));
    }
    await boss.enqueue('jobs', 't3');
    const nothing = await Promise.race([worker.recv(), new Promise((r) => setTimeout(() => r('none'), 300))]);
    assert.equal(nothing, 'none');
    let stats = await boss.queueStats('jobs');
    for (let i = 0; i < 50 && stats.in_flight !== 0; i++) {
      await new Promise((r) => setTimeout(r, 50));
      stats = await boss.queueStats('jobs');
    }
    assert.deepEqual([stats.ready, stats.in_flight], [1, 0]); // t3 waits
    await boss.close();
    await worker.close();
  } finally {
    hub.close();
    fs.rmSync(store, { recursive: true, force: true });
  }
});

test('failures reject with Error subclasses carrying the protocol code', async () => {
  const hub = await agentwire.Hub.start({ token: 's3cret' });
  try {
    await assert.rejects(agentwire.connect({ hub: hub.url, id: 'a', pin: hub.pin, token: 'wrong' }), (e) => {
      assert.ok(e instanceof agentwire.RejectedError && e instanceof Error);
      assert.equal(e.codeName, 'unauthorized');
      assert.equal(typeof e.code, 'number');
      return true;
    });
    const a = await agentwire.connect({ hub: hub.url, id: 'a', pin: hub.pin, token: 's3cret' });
    await assert.rejects(a.request('nobody', 'x'), (e) => e instanceof agentwire.RemoteError && e.codeName === 'unknown-agent');
    const slow = await agentwire.connect({ hub: hub.url, id: 'slow', pin: hub.pin, token: 's3cret' });
    await assert.rejects(a.request('slow', 'x', { timeoutMs: 200 }), agentwire.TimeoutError);
    await assert.rejects(agentwire.connect({ hub: hub.url, id: 'b', pin: `sha256:${'00'.repeat(32)}`, token: 's3cret' }), agentwire.ConnectError);
    await a.close();
    await assert.rejects(a.send('slow', 'x'), agentwire.ClosedError);
    assert.deepEqual(await (async () => { const seen = []; for await (const m of a) seen.push(m); return seen; })(), []);
    await slow.close();
  } finally {
    hub.close();
  }
});

test('bad arguments reject with ConfigError, and the agent keeps working', async () => {
  const bad = [
    [{ hub: 'quic://127.0.0.1:1', id: 'x' }, /say how to verify the hub/],
    [{ hub: 'quic://127.0.0.1:1', id: '', insecure: true }, /id/],
    [{ hub: 'quic://127.0.0.1:1', id: 'x', pin: 'sha256:zz' }, /pin/],
    [{ hub: 'quic://127.0.0.1:1', id: 'x', ca: '/nonexistent/ca.pem' }, /\/nonexistent\/ca\.pem/],
    [{ hub: 'quic://127.0.0.1:1', id: 'x', insecure: true, connectTimeoutMs: -1 }, /connectTimeoutMs/],
    [{ hub: 'quic://127.0.0.1:1', id: 7, insecure: true }, /id must be a string/],
    [{ hub: 'gopher://x:1', id: 'x', insecure: true }, /gopher/],
    [undefined, /options object/],
  ];
  for (const [options, needle] of bad) {
    await assert.rejects(agentwire.connect(options), (e) => {
      assert.ok(e instanceof agentwire.ConfigError, `${e.name}: ${e.message}`);
      assert.match(e.message, needle);
      return true;
    });
  }
  const hub = await agentwire.Hub.start();
  try {
    const a = await agentwire.connect({ hub: hub.url, id: 'a', pin: hub.pin });
    await assert.rejects(a.send('b', 12), agentwire.ConfigError);
    await assert.rejects(a.send('b', 'x', { priority: 'urgent' }), agentwire.ConfigError);
    await assert.rejects(a.send('b', 'x', { kind: 'gossip' }), agentwire.ConfigError);
    await assert.rejects(a.request('topic:news', 'x'), agentwire.ConfigError);
    await assert.rejects(a.request('b', 'x', { timeoutMs: NaN }), agentwire.ConfigError);
    await assert.rejects(a.consume('jobs', { credit: 0 }), agentwire.ConfigError);
    await assert.rejects(a.subscribe(''), agentwire.ConfigError);
    await assert.rejects(a.ack(-1), agentwire.ConfigError);
    await a.subscribe('ok');
    await a.close();
  } finally {
    hub.close();
  }
});
