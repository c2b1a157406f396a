// The agent a page (or a Web Worker) runs: connect, the hello, then send, request, publish,
// subscribe and receive, with the Node SDK's names. It owns the session's state (ids, the
// requests waiting for answers, the messages not yet read, the heartbeat); the bytes are
// frames.ts's and the transports link.ts's.

import {
  ackFrame,
  consumeFrame,
  decodeEnvelope,
  decodeGoodbye,
  decodeReject,
  decodeWelcome,
  DEFAULT_MAX_FRAME,
  encodeEnvelope,
  encodeHello,
  FrameError,
  FrameType,
  goodbyeFrame,
  heartbeatFrame,
  nackFrame,
  PRIORITIES,
  textFrame,
  type DestinationType,
  type Envelope,
  type Kind,
  type Priority,
  type RawFrame,
  type U64,
  type Welcome,
} from './frames.js';
import {
  AgentwireError,
  ClosedError,
  codeName,
  ConfigError,
  ConnectError,
  ERROR_CODES,
  RejectedError,
  RemoteError,
  TimeoutError,
  TooLargeError,
} from './errors.js';
import { WebSocketLink, WebTransportLink, type Inbound, type Link, type ReplyStream, type TransportName } from './link.js';

/** A message body: bytes as they are, a string as UTF-8. */
export type Body = Uint8Array | ArrayBuffer | ArrayBufferView | string;

/** A certificate hash as the hub prints it (hex), as bytes, or as WebTransport names it. */
export type CertificateHash = string | BufferSource | { algorithm?: string; value: BufferSource | string };

export interface ConnectOptions {
  /**
   * The hub, or addresses tried in order: `https://HOST:PORT/agentwire` or `wt://HOST:PORT`
   * (WebTransport, the hub's QUIC port), `wss://HOST:PORT` or `ws://HOST:PORT` (WebSocket,
   * path `/agentwire/v1` unless given). WebTransport addresses are skipped where the browser
   * has none.
   */
  hub: string | string[];
  /** This agent's id. */
  id: string;
  /** The hub's shared token, or this agent's credential. */
  token?: string;
  /** Role announced to the hub (default `agent`). */
  role?: string;
  /**
   * Certificates to accept by their SHA-256 alone (what `agentwire cert --webtransport` and
   * the hub print), for hubs whose certificate no CA the browser trusts has signed.
   */
  serverCertificateHashes?: CertificateHash[];
  /** Time allowed for the whole connect (default 10000). */
  connectTimeoutMs?: number;
  /** With several addresses, time allowed for each (default 3000). */
  fallbackTimeoutMs?: number;
  /** Largest frame this agent accepts (default 16 MiB). */
  maxFrameSize?: number;
  /**
   * Messages held unread before the agent stops reading WebTransport streams, so the hub's
   * sends wait instead of this page's memory growing (default 1024). WebSocket cannot pause:
   * over it messages are held however many come.
   */
  inboxLimit?: number;
  /** Abandons the connect. */
  signal?: AbortSignal;
}

export interface SendOptions {
  priority?: Priority;
  /** `event` (default), `request`, `task`, … */
  kind?: Kind;
  headers?: Record<string, string>;
  /** Time to live in ms (0: none). */
  ttlMs?: number;
}

export interface RequestOptions {
  /** Default 5000; the hub gives up at the same time. */
  timeoutMs?: number;
  priority?: Priority;
  headers?: Record<string, string>;
  /** Stops waiting (the promise rejects with the signal's reason). */
  signal?: AbortSignal;
}

export interface Receipt {
  task: U64;
  duplicate: boolean;
}

/** One address tried by `connect`, and why it was passed over. */
export interface Attempt {
  url: string;
  transport: TransportName;
  error: string | null;
}

const utf8 = new TextEncoder();
const text = new TextDecoder();

function bytesOf(body: Body): Uint8Array {
  if (typeof body === 'string') return utf8.encode(body);
  if (body instanceof Uint8Array) return body;
  if (body instanceof ArrayBuffer) return new Uint8Array(body);
  if (ArrayBuffer.isView(body)) return new Uint8Array(body.buffer, body.byteOffset, body.byteLength);
  throw new ConfigError('a body is a string, a Uint8Array, an ArrayBuffer or a view of one');
}

function hexBytes(hex: string): Uint8Array {
  const clean = hex.replace(/^sha-?256:/i, '').replace(/[:\s]/g, '');
  if (!/^[0-9a-fA-F]{64}$/.test(clean)) throw new ConfigError(`${hex} is not a SHA-256 in hex (64 digits)`);
  return Uint8Array.from(clean.match(/../g)!, (h) => parseInt(h, 16));
}

function hashBytes(h: CertificateHash): Uint8Array {
  if (typeof h === 'string') return hexBytes(h);
  if (h instanceof ArrayBuffer || ArrayBuffer.isView(h)) return bytesOf(h as Body);
  if (h.algorithm !== undefined && h.algorithm.toLowerCase() !== 'sha-256') {
    throw new ConfigError(`certificate hash algorithm ${h.algorithm}: only sha-256 is accepted by browsers`);
  }
  return typeof h.value === 'string' ? hexBytes(h.value) : bytesOf(h.value as Body);
}

interface Address {
  url: string;
  transport: TransportName;
}

/** The transport and URL an address names. */
export function parseAddress(address: string): Address {
  let u: URL;
  try {
    u = new URL(address);
  } catch {
    throw new ConfigError(`${address} is not an address (https://, wt://, wss:// or ws://)`);
  }
  const path = u.pathname === '/' || u.pathname === '' ? null : u.pathname;
  switch (u.protocol) {
    case 'https:':
      return { url: u.href, transport: 'webtransport' };
    case 'wt:':
      return { url: `https://${u.host}${path ?? '/agentwire'}`, transport: 'webtransport' };
    case 'wss:':
    case 'ws:':
      return { url: `${u.protocol}//${u.host}${path ?? '/agentwire/v1'}`, transport: 'websocket' };
    default:
      throw new ConfigError(
        `${address}: a page reaches a hub over WebTransport (https://HOST:PORT/agentwire or wt://HOST:PORT) or WebSocket (wss://, ws://)`,
      );
  }
}

function destination(to: string): { type: DestinationType; name: string } {
  if (typeof to !== 'string') throw new ConfigError('a destination is a string');
  if (to === '*' || to === 'broadcast') return { type: 'broadcast', name: '' };
  const colon = to.indexOf(':');
  const prefix = colon < 0 ? '' : to.slice(0, colon);
  const dest: { type: DestinationType; name: string } =
    prefix === 'agent' || prefix === 'topic' || prefix === 'queue'
      ? { type: prefix, name: to.slice(colon + 1) }
      : { type: 'agent', name: to };
  if (dest.name === '') throw new ConfigError(`destination ${JSON.stringify(to)} has an empty name`);
  return dest;
}

function checkPriority(p: Priority | undefined): Priority {
  const priority = p ?? 'medium';
  if (!PRIORITIES.includes(priority)) throw new ConfigError(`priority ${String(p)}: critical, high, medium or low`);
  return priority;
}

function checkHeaders(h: Record<string, string> | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(h ?? {})) {
    if (typeof v !== 'string') throw new ConfigError(`header ${k}: values are strings`);
    out[k] = v;
  }
  return out;
}

/** A received message: a request to answer, an event, a queue task, or an answer. */
export class Message {
  /** @internal */
  constructor(
    private readonly agent: Agent,
    /** The envelope as it arrived. */
    readonly envelope: Envelope,
    private readonly replyStream: ReplyStream | null,
  ) {}

  /** The sender's id for it (for a queue task: the task id to ack). */
  get id(): U64 {
    return this.envelope.id;
  }
  get sender(): string {
    return this.envelope.from;
  }
  /** Where it was sent: `agent:ID`, `topic:NAME`, `queue:NAME` or `*`. */
  get to(): string {
    const t = this.envelope.to;
    return t.type === 'broadcast' ? '*' : `${t.type}:${t.name}`;
  }
  get kind(): Kind {
    return this.envelope.kind;
  }
  get priority(): Priority {
    return this.envelope.priority;
  }
  get correlation(): U64 | null {
    return this.envelope.correlation;
  }
  get headers(): Record<string, string> {
    return this.envelope.headers;
  }
  get body(): Uint8Array {
    return this.envelope.body;
  }
  get text(): string {
    return text.decode(this.envelope.body);
  }
  /** For a queue task: its queue. */
  get queue(): string | null {
    return this.envelope.to.type === 'queue' ? this.envelope.to.name : null;
  }
  /** For a queue task: 1 for the first delivery, more for redeliveries. */
  get attempt(): number | null {
    const a = this.envelope.headers['attempt'];
    return a === undefined ? null : Number(a);
  }
  get isRequest(): boolean {
    return this.envelope.kind === 'request';
  }
  json(): unknown {
    return JSON.parse(this.text);
  }

  /** Answers this request with `body` (on the request's own stream when it has one). */
  async reply(body: Body): Promise<void> {
    if (!this.isRequest) throw new ConfigError('only a request can be answered');
    await this.agent._answer(this.envelope, bytesOf(body), this.replyStream);
  }
}

interface Pending {
  resolve: (m: Message) => void;
  reject: (e: unknown) => void;
}

/** A connected agent. Iterate it (`for await (const msg of agent)`) to receive. */
export class Agent implements AsyncIterable<Message> {
  /** Why the session ended (`null` while it is open). */
  closedReason: string | null = null;
  /** The protocol's code for the close, when the hub gave one. */
  closedCode: number | null = null;
  /** Resolves once the session has ended, for whatever reason. */
  readonly closed: Promise<void>;
  /** The addresses `connect` passed over before this one. */
  attempts: Attempt[] = [];

  private nextId = 1;
  private readonly pending = new Map<U64, Pending>();
  private readonly inbox: Message[] = [];
  private readonly readers: ((m: Message | null) => void)[] = [];
  private room: (() => void) | null = null;
  private roomWait: Promise<void> | null = null;
  private welcome: Welcome | null = null;
  private handshake: { resolve: (w: Welcome) => void; reject: (e: unknown) => void } | null = null;
  private heartbeat: ReturnType<typeof setInterval> | null = null;
  private lastSent = Date.now();
  private beats = 0;
  private datagramBeats = 0;
  private ended = false;
  private markClosed!: () => void;
  private readonly counts = { sent: 0, received: 0, requests: 0, answers: 0 };

  /** @internal */
  constructor(
    readonly id: string,
    private readonly link: Link,
    /** The address this agent landed on. */
    readonly url: string,
    private readonly inboxLimit: number,
  ) {
    this.closed = new Promise((resolve) => (this.markClosed = resolve));
  }

  /** The transport the session runs on. */
  get transport(): TransportName {
    return this.link.transport;
  }

  /** The frame limit both sides enforce. */
  get maxFrameSize(): number {
    return this.welcome?.maxFrameSize ?? DEFAULT_MAX_FRAME;
  }

  /** @internal The hello and its answer. */
  async _open(hello: Uint8Array, signal: AbortSignal): Promise<void> {
    const welcome = new Promise<Welcome>((resolve, reject) => {
      this.handshake = { resolve, reject };
      signal.addEventListener('abort', () => reject(signal.reason ?? new Error('aborted')), { once: true });
    });
    this.link.start(this.inbound());
    await this.link.control(hello);
    const w = await welcome.catch((e: unknown) => {
      this.link.close(0, 'handshake abandoned');
      throw e;
    });
    this.welcome = w;
    this.link.setMaxFrameSize(w.maxFrameSize);
    const every = Math.max(100, w.heartbeatIntervalMs);
    this.heartbeat = setInterval(() => {
      if (Date.now() - this.lastSent >= every / 2) {
        this.beats += 1;
        this.lastSent = Date.now();
        this.link.heartbeat(heartbeatFrame(this.beats, Date.now() * 1000)).then(
          (datagram) => {
            if (datagram) this.datagramBeats += 1;
          },
          () => {},
        );
      }
    }, every / 2);
  }

  private inbound(): Inbound {
    return {
      frame: (f, reply) => this.onFrame(f, reply),
      closed: (code, reason) => this.onClosed(code, reason),
    };
  }

  private onFrame(f: RawFrame, reply?: ReplyStream): void | Promise<void> {
    try {
      if (this.handshake !== null) return this.onHandshake(f);
      switch (f.type) {
        case FrameType.Envelope:
          return this.onEnvelope(decodeEnvelope(f.payload), reply ?? null);
        case FrameType.Goodbye:
        case FrameType.CountedGoodbye: {
          const g = decodeGoodbye(f);
          this.closedCode = g.code;
          this.closedReason = `${codeName(g.code)}: ${g.reason}`;
          return;
        }
        case FrameType.Heartbeat:
          return;
        default:
          throw new FrameError(`the hub sent frame type 0x${f.type.toString(16)} after the handshake`, 1);
      }
    } catch (e) {
      if (!(e instanceof FrameError)) throw e;
      this.link.close(e.code, e.message);
      this.onClosed(e.code, e.message);
    }
  }

  private onHandshake(f: RawFrame): void {
    const h = this.handshake!;
    this.handshake = null;
    if (f.type === FrameType.Welcome) {
      const w = decodeWelcome(f.payload);
      if (w.version !== 1 || w.codec !== 'msgpack' || w.maxFrameSize === 0 || w.maxFrameSize > DEFAULT_MAX_FRAME * 64) {
        h.reject(new ConnectError(`the hub's welcome chose what this agent did not offer (${w.codec}, version ${w.version})`, 1));
        return;
      }
      h.resolve(w);
    } else if (f.type === FrameType.Reject) {
      const r = decodeReject(f.payload);
      h.reject(new RejectedError(`the hub refused the agent: ${r.reason}`, r.code));
    } else {
      h.reject(new ConnectError(`the hub answered the hello with frame type 0x${f.type.toString(16)}`, 1));
    }
  }

  private onEnvelope(env: Envelope, reply: ReplyStream | null): void | Promise<void> {
    this.counts.received += 1;
    if ((env.kind === 'response' || env.kind === 'error') && env.correlation !== null) {
      const waiting = this.pending.get(env.correlation);
      if (waiting !== undefined) {
        this.pending.delete(env.correlation);
        this.counts.answers += 1;
        waiting.resolve(new Message(this, env, null));
        return;
      }
    }
    if (reply !== null && env.kind !== 'request') reply.abandon();
    const msg = new Message(this, env, env.kind === 'request' ? reply : null);
    if (reply !== null && env.kind === 'request') {
      // An unanswered request's stream is given up when the hub would give up on it.
      const timer = setTimeout(() => reply.abandon(), env.ttlMs > 0 ? env.ttlMs : 60_000);
      const answer = reply.answer;
      reply.answer = (frame) => {
        clearTimeout(timer);
        return answer(frame);
      };
    }
    const reader = this.readers.shift();
    if (reader !== undefined) return reader(msg);
    this.inbox.push(msg);
    if (this.inbox.length >= this.inboxLimit) {
      this.roomWait ??= new Promise((resolve) => (this.room = resolve));
      return this.roomWait;
    }
  }

  private onClosed(code: number | null, reason: string): void {
    if (this.ended) return;
    this.ended = true;
    if (this.heartbeat !== null) clearInterval(this.heartbeat);
    this.heartbeat = null;
    if (this.closedReason === null) {
      this.closedCode = code;
      this.closedReason = reason;
    }
    const err = new ClosedError(`the session closed: ${this.closedReason}`, this.closedCode);
    this.handshake?.reject(err);
    this.handshake = null;
    for (const p of this.pending.values()) p.reject(err);
    this.pending.clear();
    for (const r of this.readers.splice(0)) r(null);
    this.releaseRoom();
    this.markClosed();
  }

  private releaseRoom(): void {
    this.room?.();
    this.room = null;
    this.roomWait = null;
  }

  private alive(): void {
    if (this.ended) {
      throw new ClosedError(`the session closed: ${this.closedReason}`, this.closedCode);
    }
  }

  private control(frame: Uint8Array): Promise<void> {
    this.lastSent = Date.now();
    return this.link.control(frame);
  }

  private envelope(to: string, body: Body, kind: Kind, o: { priority?: Priority; headers?: Record<string, string>; ttlMs?: number }): Envelope {
    return {
      id: this.nextId++,
      from: this.id,
      to: destination(to),
      kind,
      priority: checkPriority(o.priority),
      ttlMs: o.ttlMs ?? 0,
      timestampUs: Date.now() * 1000,
      correlation: null,
      headers: checkHeaders(o.headers),
      body: bytesOf(body),
    };
  }

  private encode(env: Envelope): Uint8Array {
    const frame = encodeEnvelope(env);
    if (frame.length - 4 > this.maxFrameSize) {
      throw new TooLargeError(`a message of ${frame.length} bytes is over the session's frame limit of ${this.maxFrameSize}`, 2);
    }
    return frame;
  }

  private transmit(env: Envelope, request: boolean): Promise<void> {
    const frame = this.encode(env);
    return this.toLink(1, () => this.link.message(frame, env.priority, request));
  }

  /** Hands `count` encoded messages to the link with `write`; a link failure is a `ClosedError`. */
  private async toLink(count: number, write: () => Promise<void>): Promise<void> {
    this.lastSent = Date.now();
    this.counts.sent += count;
    try {
      await write();
    } catch (e) {
      throw new ClosedError(`could not send: ${(e as Error)?.message ?? e}`, this.closedCode, null, { cause: e });
    }
  }

  /** Sends `body` to `to` (an agent id, `topic:NAME`, `queue:NAME` or `*`); resolves to its id. */
  async send(to: string, body: Body, options: SendOptions = {}): Promise<U64> {
    this.alive();
    const env = this.envelope(to, body, options.kind ?? 'event', options);
    await this.transmit(env, false);
    return env.id;
  }

  /** Sends a request to agent `to`; resolves to its answer, or rejects with a typed error. */
  async request(to: string, body: Body, options: RequestOptions = {}): Promise<Message> {
    this.alive();
    const timeoutMs = options.timeoutMs ?? 5000;
    if (!(timeoutMs > 0 && timeoutMs < 2 ** 32)) throw new ConfigError(`timeoutMs ${timeoutMs}: between 1 and 2^32-1`);
    options.signal?.throwIfAborted();
    const env = this.envelope(to, body, 'request', { ...options, ttlMs: Math.ceil(timeoutMs) });
    this.counts.requests += 1;
    let timer: ReturnType<typeof setTimeout> | undefined;
    let onAbort: (() => void) | undefined;
    const answer = new Promise<Message>((resolve, reject) => {
      this.pending.set(env.id, { resolve, reject });
      timer = setTimeout(() => {
        this.pending.delete(env.id);
        reject(new TimeoutError(`no answer from ${to} within ${timeoutMs} ms`, 18));
      }, timeoutMs);
      if (options.signal) {
        onAbort = () => {
          this.pending.delete(env.id);
          reject(options.signal!.reason);
        };
        options.signal.addEventListener('abort', onAbort, { once: true });
      }
    });
    try {
      await this.transmit(env, true);
      const msg = await answer;
      if (msg.kind === 'error') throw remoteError(msg);
      return msg;
    } finally {
      this.pending.delete(env.id);
      clearTimeout(timer);
      if (onAbort) options.signal!.removeEventListener('abort', onAbort);
    }
  }

  /** The next message, or `null` once the session has ended and every message was read. */
  recv(): Promise<Message | null> {
    const msg = this.inbox.shift();
    if (msg !== undefined) {
      if (this.inbox.length < this.inboxLimit) this.releaseRoom();
      return Promise.resolve(msg);
    }
    if (this.ended) return Promise.resolve(null);
    return new Promise((resolve) => this.readers.push(resolve));
  }

  async *[Symbol.asyncIterator](): AsyncIterator<Message> {
    for (let m = await this.recv(); m !== null; m = await this.recv()) yield m;
  }

  /** Receives what is published to `topic` (`$presence`: joins and leaves). */
  subscribe(topic: string): Promise<void> {
    this.alive();
    return this.control(textFrame(FrameType.Subscribe, topic));
  }

  unsubscribe(topic: string): Promise<void> {
    this.alive();
    return this.control(textFrame(FrameType.Unsubscribe, topic));
  }

  /** Sends `body` as an event to every subscriber of `topic`; resolves to its id. */
  publish(topic: string, body: Body, options: Omit<SendOptions, 'kind'> = {}): Promise<U64> {
    return this.send(`topic:${topic}`, body, { ...options, kind: 'event' });
  }

  /**
   * Publishes every body as an event to `topic`, written together (over WebTransport several
   * to a stream); resolves to their ids in order. Nothing is sent when one body is over the
   * session's frame limit.
   */
  async publishMany(topic: string, bodies: Body[], options: Omit<SendOptions, 'kind'> = {}): Promise<U64[]> {
    this.alive();
    if (!Array.isArray(bodies)) throw new ConfigError(`bodies: an array, not ${typeof bodies}`);
    const envs = bodies.map((body) => this.envelope(`topic:${topic}`, body, 'event', options));
    const frames = envs.map((env) => this.encode(env));
    if (frames.length === 0) return [];
    await this.toLink(frames.length, () => this.link.messages(frames, envs[0].priority));
    return envs.map((env) => env.id);
  }

  /** Stores a task in work queue `queue`; resolves once the hub stored it. */
  async enqueue(queue: string, body: Body, options: { producerId?: string; timeoutMs?: number } = {}): Promise<Receipt> {
    const headers: Record<string, string> = {};
    if (options.producerId !== undefined) headers['producer-id'] = options.producerId;
    const r = await this.request(`queue:${queue}`, body, { timeoutMs: options.timeoutMs ?? 10000, headers });
    const task = r.headers['task-id'];
    if (task === undefined || !/^\d+$/.test(task)) throw new AgentwireError('the hub answered an enqueue without a task id', 1);
    const n = BigInt(task);
    return { task: n <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(n) : n, duplicate: r.headers['duplicate'] === 'true' };
  }

  /** Takes tasks from `queue`, `credit` at a time (they arrive as messages of kind `task`). */
  consume(queue: string, options: { credit?: number } = {}): Promise<void> {
    this.alive();
    const credit = options.credit ?? 1;
    if (!Number.isInteger(credit) || credit < 1 || credit >= 2 ** 32) throw new ConfigError(`credit ${credit}: 1 or more`);
    return this.control(consumeFrame(queue, credit));
  }

  /** Stops taking tasks from `queue` (tasks held go back to it). */
  stopConsuming(queue: string): Promise<void> {
    this.alive();
    return this.control(consumeFrame(queue, 0));
  }

  /** A delivered task is done. */
  ack(task: U64 | Message): Promise<void> {
    this.alive();
    return this.control(ackFrame(task instanceof Message ? task.id : task));
  }

  /** A delivered task could not be done: again after `delayMs` (default: the queue's backoff). */
  nack(task: U64 | Message, options: { delayMs?: number } = {}): Promise<void> {
    this.alive();
    return this.control(nackFrame(task instanceof Message ? task.id : task, options.delayMs ?? null));
  }

  /** A queue's counts (`ready`, `waiting`, `in_flight`, `dead`, `consumers`). */
  async queueStats(queue: string, options: { timeoutMs?: number } = {}): Promise<Record<string, unknown>> {
    const r = await this.request(`queue:${queue}`, '', { timeoutMs: options.timeoutMs ?? 5000, headers: { 'queue-op': 'stats' } });
    return r.json() as Record<string, unknown>;
  }

  /** What this agent has done so far. */
  stats(): Record<string, unknown> {
    return {
      transport: this.transport,
      url: this.url,
      ...this.counts,
      waiting: this.pending.size,
      unread: this.inbox.length,
      heartbeats: this.beats,
      heartbeatDatagrams: this.datagramBeats,
    };
  }

  /** Says goodbye and closes the session. */
  async close(): Promise<void> {
    if (!this.ended) {
      await Promise.race([
        this.control(goodbyeFrame(0, 'closed by the agent')).catch(() => {}),
        new Promise((r) => setTimeout(r, 200)),
      ]);
      this.link.close(0, 'closed by the agent');
      this.onClosed(0, 'closed by the agent');
    }
    await this.closed;
  }

  /** @internal */
  async _answer(request: Envelope, body: Uint8Array, stream: ReplyStream | null): Promise<void> {
    this.alive();
    const env: Envelope = {
      id: this.nextId++,
      from: this.id,
      to: { type: 'agent', name: request.from },
      kind: 'response',
      priority: request.priority,
      ttlMs: 0,
      timestampUs: Date.now() * 1000,
      correlation: request.id,
      headers: {},
      body,
    };
    if (stream !== null) {
      const frame = this.encode(env);
      this.counts.sent += 1;
      this.lastSent = Date.now();
      return stream.answer(frame);
    }
    return this.transmit(env, false);
  }
}

function remoteError(msg: Message): AgentwireError {
  // The `code` header names the code (`unknown-agent`); a number is read as well.
  const header = msg.headers['code'] ?? '';
  const byName = ERROR_CODES.indexOf(header);
  const code = byName >= 0 ? byName : /^\d+$/.test(header) ? Number(header) : null;
  // The hub's own deadline for a request is the requester's: as the Rust agent, a timeout.
  if (code === 18 && msg.sender === '$hub') return new TimeoutError(msg.text || 'no answer in time', 18);
  return new RemoteError(msg.text || `error from ${msg.sender}`, code, code === null ? header || null : null);
}

/** Connects to the hub: the first address that answers, over the transport it names. */
export async function connect(options: ConnectOptions): Promise<Agent> {
  if (typeof options !== 'object' || options === null) throw new ConfigError('connect takes an options object');
  const { id } = options;
  if (typeof id !== 'string' || id === '') throw new ConfigError('id: a non-empty string');
  const list = Array.isArray(options.hub) ? options.hub : [options.hub];
  if (list.length === 0 || list.some((h) => typeof h !== 'string')) throw new ConfigError('hub: an address or a list of them');
  const addresses = list.map(parseAddress);
  const hashes = (options.serverCertificateHashes ?? []).map(hashBytes);
  for (const h of hashes) if (h.length !== 32) throw new ConfigError('a SHA-256 certificate hash is 32 bytes');
  const maxFrameSize = options.maxFrameSize ?? DEFAULT_MAX_FRAME;
  if (!Number.isInteger(maxFrameSize) || maxFrameSize < 64 || maxFrameSize >= 2 ** 32) {
    throw new ConfigError(`maxFrameSize ${maxFrameSize}: 64 to 2^32-1`);
  }
  const inboxLimit = options.inboxLimit ?? 1024;
  const total = options.connectTimeoutMs ?? 10000;
  const each = addresses.length > 1 ? (options.fallbackTimeoutMs ?? 3000) : total;
  const deadline = Date.now() + total;
  const hello = encodeHello({
    agentId: id,
    role: options.role ?? 'agent',
    capabilities: [],
    token: options.token ?? null,
    maxFrameSize,
  });
  const attempts: Attempt[] = [];
  let last: unknown = null;
  for (const a of addresses) {
    options.signal?.throwIfAborted();
    if (a.transport === 'webtransport' && typeof WebTransport === 'undefined') {
      attempts.push({ ...a, error: 'this browser has no WebTransport' });
      continue;
    }
    const budget = Math.min(each, deadline - Date.now());
    if (budget <= 0) break;
    const stop = new AbortController();
    const timer = setTimeout(() => stop.abort(new TimeoutError(`no session with ${a.url} within ${budget} ms`)), budget);
    const onAbort = () => stop.abort(options.signal!.reason);
    options.signal?.addEventListener('abort', onAbort, { once: true });
    try {
      const link =
        a.transport === 'webtransport'
          ? await WebTransportLink.open({ url: a.url, hashes, maxFrameSize }, stop.signal)
          : await WebSocketLink.open(a.url, maxFrameSize, stop.signal);
      const agent = new Agent(id, link, a.url, inboxLimit);
      await agent._open(hello, stop.signal);
      agent.attempts = attempts;
      return agent;
    } catch (e) {
      // The hub answered and refused: another address of the same hub would refuse as well.
      if (e instanceof RejectedError) throw e;
      if (options.signal?.aborted) throw options.signal.reason;
      last = stop.signal.aborted ? stop.signal.reason : e;
      attempts.push({ ...a, error: String((last as Error)?.message ?? last) });
    } finally {
      clearTimeout(timer);
      options.signal?.removeEventListener('abort', onAbort);
    }
  }
  const tried = attempts.map((t) => `${t.url} (${t.transport}): ${t.error}`).join('; ');
  throw new ConnectError(`no session with the hub: ${tried || 'no time left'}`, null, null, { cause: last });
}
