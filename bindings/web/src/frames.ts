// Frames and envelopes (docs/protocol.md): a 4-byte big-endian length, a type byte, the
// payload; the handshake's messages and envelopes as MessagePack arrays. `FrameReader` cuts
// frames out of a byte stream and refuses one over the limit from its length prefix alone,
// before its body is buffered.
//
// This module owns bytes <-> frames; it must not touch a transport or a timer.

import { decode, encode, MsgpackError, type Value } from './msgpack.js';

/** The type byte of each frame. */
export const FrameType = {
  Hello: 0x01,
  Welcome: 0x02,
  Reject: 0x03,
  Envelope: 0x10,
  Subscribe: 0x20,
  Unsubscribe: 0x21,
  Consume: 0x22,
  Ack: 0x23,
  Nack: 0x24,
  Heartbeat: 0x30,
  Goodbye: 0x40,
  CountedGoodbye: 0x41,
} as const;

export const PROTOCOL_VERSION = 1;
/** The largest frame an agent accepts unless told otherwise (16 MiB, as the Rust agent). */
export const DEFAULT_MAX_FRAME = 16 * 1024 * 1024;

export type Kind = 'task' | 'result' | 'state' | 'heartbeat' | 'sync' | 'request' | 'response' | 'event' | 'error';
export type Priority = 'critical' | 'high' | 'medium' | 'low';
export type DestinationType = 'agent' | 'topic' | 'broadcast' | 'queue';

export const KINDS: readonly Kind[] = ['task', 'result', 'state', 'heartbeat', 'sync', 'request', 'response', 'event', 'error'];
export const PRIORITIES: readonly Priority[] = ['critical', 'high', 'medium', 'low'];
const DESTINATIONS: readonly DestinationType[] = ['agent', 'topic', 'broadcast', 'queue'];

/** A message id, correlation or timestamp: a u64, as a `bigint` past 2^53. */
export type U64 = number | bigint;

/** One agent message (docs/protocol.md, "Envelope encoding: MessagePack"). */
export interface Envelope {
  id: U64;
  from: string;
  to: { type: DestinationType; name: string };
  kind: Kind;
  priority: Priority;
  ttlMs: number;
  timestampUs: U64;
  correlation: U64 | null;
  headers: Record<string, string>;
  body: Uint8Array;
}

export interface Hello {
  agentId: string;
  role: string;
  capabilities: string[];
  token: string | null;
  maxFrameSize: number;
  /** Codecs offered, preferred first (default: MessagePack alone, the one this SDK speaks). */
  codecs?: string[];
}

export interface Welcome {
  version: number;
  codec: string;
  sessionId: U64;
  maxFrameSize: number;
  heartbeatIntervalMs: number;
  capabilities: string[];
}

/** A frame whose payload is not decoded yet. */
export interface RawFrame {
  type: number;
  payload: Uint8Array;
}

/** Bytes that are not a frame this version reads; `code` is the close code it calls for. */
export class FrameError extends Error {
  constructor(message: string, readonly code: number) {
    super(message);
    this.name = 'FrameError';
  }
}

const MALFORMED = 3;
const TOO_LARGE = 2;
const utf8 = new TextEncoder();
const fromUtf8 = new TextDecoder('utf-8', { fatal: true });

/** The whole frame: length prefix, type byte, payload. */
export function frame(type: number, payload: Uint8Array = new Uint8Array(0)): Uint8Array {
  const out = new Uint8Array(5 + payload.length);
  new DataView(out.buffer).setUint32(0, payload.length + 1);
  out[4] = type;
  out.set(payload, 5);
  return out;
}

export function encodeHello(h: Hello): Uint8Array {
  return frame(
    FrameType.Hello,
    encode([PROTOCOL_VERSION, PROTOCOL_VERSION, h.agentId, h.role, h.capabilities, h.codecs ?? ['msgpack'], h.token, h.maxFrameSize]),
  );
}

function malformed(what: string, why: string): FrameError {
  return new FrameError(`malformed ${what}: ${why}`, MALFORMED);
}

function fields(payload: Uint8Array, what: string, n: number): Value[] {
  let v: Value;
  try {
    v = decode(payload);
  } catch (e) {
    throw malformed(what, (e as Error).message);
  }
  if (!Array.isArray(v) || v.length !== n) throw malformed(what, `expected an array of ${n}`);
  return v;
}

function uint(v: Value, what: string, max: number): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v > max) throw malformed(what, `${String(v)} is not a u32`);
  return v;
}

function u64(v: Value, what: string): U64 {
  if (typeof v === 'bigint' ? v < 0n : typeof v !== 'number' || !Number.isInteger(v) || v < 0) {
    throw malformed(what, `${String(v)} is not a u64`);
  }
  return v as U64;
}

function str(v: Value, what: string): string {
  if (typeof v !== 'string') throw malformed(what, 'expected a string');
  return v;
}

function strings(v: Value, what: string): string[] {
  if (!Array.isArray(v)) throw malformed(what, 'expected an array of strings');
  return v.map((s) => str(s, what));
}

export function decodeWelcome(payload: Uint8Array): Welcome {
  const f = fields(payload, 'welcome', 6);
  return {
    version: uint(f[0], 'welcome', 0xffff),
    codec: str(f[1], 'welcome'),
    sessionId: u64(f[2], 'welcome'),
    maxFrameSize: uint(f[3], 'welcome', 0xffffffff),
    heartbeatIntervalMs: uint(f[4], 'welcome', 0xffffffff),
    capabilities: strings(f[5], 'welcome'),
  };
}

export function decodeReject(payload: Uint8Array): { code: number; reason: string } {
  const f = fields(payload, 'reject', 2);
  return { code: uint(f[0], 'reject', 0xffffffff), reason: str(f[1], 'reject') };
}

export function encodeEnvelope(e: Envelope): Uint8Array {
  const headers = new Map<Value, Value>(
    Object.keys(e.headers)
      .sort(byUtf8)
      .map((k) => [k, e.headers[k]]),
  );
  const payload = encode([
    e.id,
    e.from,
    [DESTINATIONS.indexOf(e.to.type), e.to.type === 'broadcast' ? '' : e.to.name],
    KINDS.indexOf(e.kind),
    PRIORITIES.indexOf(e.priority),
    e.ttlMs,
    e.timestampUs,
    e.correlation,
    headers,
    e.body,
  ]);
  return frame(FrameType.Envelope, payload);
}

/** Header keys sorted by their UTF-8 bytes, as the reference encoder writes them. */
function byUtf8(a: string, b: string): number {
  const x = utf8.encode(a);
  const y = utf8.encode(b);
  for (let i = 0; i < Math.min(x.length, y.length); i++) if (x[i] !== y[i]) return x[i] - y[i];
  return x.length - y.length;
}

export function decodeEnvelope(payload: Uint8Array): Envelope {
  const f = fields(payload, 'envelope', 10);
  const to = f[2];
  if (!Array.isArray(to) || to.length !== 2) throw malformed('envelope', 'destination is not [tag, name]');
  const type = DESTINATIONS[uint(to[0], 'envelope', 255)];
  const kind = KINDS[uint(f[3], 'envelope', 255)];
  const priority = PRIORITIES[uint(f[4], 'envelope', 255)];
  if (type === undefined || kind === undefined || priority === undefined) {
    throw malformed('envelope', 'unknown destination, kind or priority code');
  }
  const headerMap = f[8];
  if (!(headerMap instanceof Map)) throw malformed('envelope', 'headers are not a map');
  const headers: Record<string, string> = {};
  for (const [k, v] of headerMap) {
    // defineProperty: a header named `__proto__` is a header, not the object's prototype.
    Object.defineProperty(headers, str(k, 'envelope'), {
      value: str(v, 'envelope'),
      enumerable: true,
      writable: true,
      configurable: true,
    });
  }
  const body = f[9];
  if (!(body instanceof Uint8Array)) throw malformed('envelope', 'body is not binary');
  return {
    id: u64(f[0], 'envelope'),
    from: str(f[1], 'envelope'),
    to: { type, name: str(to[1], 'envelope') },
    kind,
    priority,
    ttlMs: uint(f[5], 'envelope', 0xffffffff),
    timestampUs: u64(f[6], 'envelope'),
    correlation: f[7] === null ? null : u64(f[7], 'envelope'),
    headers,
    body,
  };
}

export function textFrame(type: number, text: string): Uint8Array {
  return frame(type, utf8.encode(text));
}

export function consumeFrame(queue: string, credit: number): Uint8Array {
  const name = utf8.encode(queue);
  const payload = new Uint8Array(4 + name.length);
  new DataView(payload.buffer).setUint32(0, credit);
  payload.set(name, 4);
  return frame(FrameType.Consume, payload);
}

export function ackFrame(task: U64): Uint8Array {
  const payload = new Uint8Array(8);
  new DataView(payload.buffer).setBigUint64(0, BigInt(task));
  return frame(FrameType.Ack, payload);
}

export function nackFrame(task: U64, delayMs: number | null): Uint8Array {
  const payload = new Uint8Array(12);
  const view = new DataView(payload.buffer);
  view.setBigUint64(0, BigInt(task));
  view.setUint32(8, delayMs ?? 0xffffffff);
  return frame(FrameType.Nack, payload);
}

export function heartbeatFrame(seq: number, timestampUs: number): Uint8Array {
  const payload = new Uint8Array(16);
  const view = new DataView(payload.buffer);
  view.setBigUint64(0, BigInt(seq));
  view.setBigUint64(8, BigInt(Math.max(0, Math.floor(timestampUs))));
  return frame(FrameType.Heartbeat, payload);
}

export function goodbyeFrame(code: number, reason: string): Uint8Array {
  const text = utf8.encode(reason);
  const payload = new Uint8Array(4 + text.length);
  new DataView(payload.buffer).setUint32(0, code);
  payload.set(text, 4);
  return frame(FrameType.Goodbye, payload);
}

/** A Goodbye's code and reason (`0x40`, or `0x41` with its stream count first). */
export function decodeGoodbye(f: RawFrame): { code: number; reason: string } {
  const skip = f.type === FrameType.CountedGoodbye ? 8 : 0;
  if (f.payload.length < skip + 4) throw malformed('goodbye', `${f.payload.length} bytes`);
  const view = new DataView(f.payload.buffer, f.payload.byteOffset, f.payload.byteLength);
  const code = view.getUint32(skip);
  return { code, reason: new TextDecoder().decode(f.payload.subarray(skip + 4)) };
}

/** A topic or queue name from a frame's payload. */
export function decodeText(payload: Uint8Array, what: string): string {
  try {
    return fromUtf8.decode(payload);
  } catch {
    throw malformed(what, 'not UTF-8');
  }
}

/**
 * Cuts frames out of a byte stream in any chunking. A length prefix over `maxFrameSize` is
 * refused as soon as its 4 bytes are in, so a peer announcing a huge frame gets nothing
 * buffered for it.
 */
export class FrameReader {
  private chunks: Uint8Array[] = [];
  private held = 0;

  constructor(public maxFrameSize: number) {}

  /** Bytes buffered and not yet returned as frames. */
  get buffered(): number {
    return this.held;
  }

  push(chunk: Uint8Array): void {
    if (chunk.length === 0) return;
    this.chunks.push(chunk);
    this.held += chunk.length;
  }

  /** The next whole frame, or `null` until more bytes come. */
  next(): RawFrame | null {
    if (this.held < 4) return null;
    const head = this.peek(4);
    const len = new DataView(head.buffer, head.byteOffset, 4).getUint32(0);
    if (len === 0) throw new FrameError('empty frame (length 0)', MALFORMED);
    if (len > this.maxFrameSize) {
      throw new FrameError(`frame of ${len} bytes exceeds the limit of ${this.maxFrameSize}`, TOO_LARGE);
    }
    if (this.held < 4 + len) return null;
    const whole = this.take(4 + len);
    return { type: whole[4], payload: whole.subarray(5) };
  }

  /** Throws when the stream ended inside a frame. */
  finish(): void {
    if (this.held > 0) throw new FrameError(`input ended inside a frame (${this.held} bytes)`, MALFORMED);
  }

  private peek(n: number): Uint8Array {
    if (this.chunks[0].length >= n) return this.chunks[0];
    const out = this.take(n);
    this.chunks.unshift(out);
    this.held += n;
    return out;
  }

  private take(n: number): Uint8Array {
    const first = this.chunks[0];
    if (first.length >= n) {
      this.held -= n;
      if (first.length === n) this.chunks.shift();
      else this.chunks[0] = first.subarray(n);
      return first.subarray(0, n);
    }
    const out = new Uint8Array(n);
    let at = 0;
    while (at < n) {
      const c = this.chunks[0];
      const use = Math.min(c.length, n - at);
      out.set(c.subarray(0, use), at);
      at += use;
      if (use === c.length) this.chunks.shift();
      else this.chunks[0] = c.subarray(use);
    }
    this.held -= n;
    return out;
  }
}

export { MsgpackError };
