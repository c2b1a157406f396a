'use strict';
// agentwire for Node.js: the idiomatic API over the native addon (agentwire.node, built by
// `npm run build` from the crate agentwire-node). Options objects, Promises, async iterators,
// and errors as subclasses of Error carrying the protocol's error code.

const path = require('node:path');

function loadNative() {
  try {
    return require(path.join(__dirname, 'agentwire.node'));
  } catch (e) {
    const err = new Error(
      `agentwire: the native addon is not built (${e.message}); run \`npm run build\` in ${__dirname}`,
    );
    err.cause = e;
    throw err;
  }
}
const native = loadNative();

/** Any agentwire failure. `code`/`codeName`: the protocol's error code, if there is one. */
class AgentwireError extends Error {
  constructor(message, code = null, codeName = null) {
    super(message);
    this.name = new.target.name;
    this.code = code;
    this.codeName = codeName;
  }
}
/** A bad argument or option. */
class ConfigError extends AgentwireError {}
/** The hub could not be reached, or TLS failed. */
class ConnectError extends AgentwireError {}
/** The hub refused the agent (`codeName`: `unauthorized`, `duplicate-agent-id`, …). */
class RejectedError extends AgentwireError {}
/** The hub or the peer answered with an error (`codeName`: `unknown-agent`, …). */
class RemoteError extends AgentwireError {}
/** No answer in time. */
class TimeoutError extends AgentwireError {}
/** The connection is gone, or the agent was closed. */
class ClosedError extends AgentwireError {}
/** The message is larger than the hub accepts. */
class TooLargeError extends AgentwireError {}

const CLASSES = {
  AgentwireError,
  ConfigError,
  ConnectError,
  RejectedError,
  RemoteError,
  TimeoutError,
  ClosedError,
  TooLargeError,
};

/** The error the addon threw, as one of the classes above. */
function convert(e) {
  if (e instanceof AgentwireError) return e;
  const text = e && typeof e.message === 'string' ? e.message : String(e);
  if (text.startsWith('agentwire|')) {
    const [, cls, code, codeName, ...rest] = text.split('|');
    const Class = CLASSES[cls] || AgentwireError;
    return new Class(rest.join('|'), code === '' ? null : Number(code), codeName || null);
  }
  if (e && e.code === 'InvalidArg') return new ConfigError(text);
  return e;
}

async function call(promise) {
  try {
    return await promise;
  } catch (e) {
    throw convert(e);
  }
}

function invoke(fn) {
  try {
    return call(fn());
  } catch (e) {
    return Promise.reject(convert(e));
  }
}

// Calls in flight on the hot path (request, send, publish, recv, reply). The addon appends
// each finished call to one queue and calls `settle` when the queue was empty, so a burst of
// answers costs one crossing into JavaScript, not one each. While calls are in flight the
// wake-up keeps the process alive; with none it does not.
const pending = new Map();
let nextTicket = 0;
let completions = null;

function settle() {
  for (const done of completions.take()) {
    const entry = pending.get(done.ticket);
    if (entry === undefined) continue;
    pending.delete(done.ticket);
    if (done.error != null) entry.reject(convert(new Error(done.error)));
    else entry.resolve(done.message ?? done.id ?? null);
  }
  if (pending.size === 0) completions.setBusy(false);
}

/** Starts a hot-path call: `start(completions, ticket)`; resolves to its result. */
function dispatch(start) {
  if (completions === null) completions = new native.Completions(() => settle());
  const ticket = ++nextTicket;
  return new Promise((resolve, reject) => {
    try {
      start(completions, ticket);
    } catch (e) {
      reject(convert(e));
      return;
    }
    if (pending.size === 0) completions.setBusy(true);
    pending.set(ticket, { resolve, reject });
  });
}

const PRIORITIES = ['critical', 'high', 'medium', 'low'];

function bodyOf(body) {
  if (typeof body === 'string' || Buffer.isBuffer(body)) return body;
  if (body instanceof Uint8Array) return Buffer.from(body.buffer, body.byteOffset, body.byteLength);
  throw new ConfigError(`a body is a Buffer, a Uint8Array or a string, not ${typeof body}`);
}

function text(name, value) {
  if (typeof value !== 'string') throw new ConfigError(`${name} must be a string, not ${typeof value}`);
  return value;
}

function milliseconds(name, value) {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'number' || !Number.isFinite(value) || value <= 0) {
    throw new ConfigError(`${name} must be a positive number of milliseconds, not ${value}`);
  }
  return value;
}

function priorityOf(priority = 'medium') {
  if (!PRIORITIES.includes(priority)) {
    throw new ConfigError(`priority must be one of ${PRIORITIES.join(', ')}, not ${priority}`);
  }
  return priority;
}

function headersOf(headers) {
  if (headers === undefined || headers === null) return undefined;
  if (typeof headers !== 'object' || Object.values(headers).some((v) => typeof v !== 'string')) {
    throw new ConfigError('headers must be an object of string values');
  }
  return headers;
}

/** A received message: a request to answer, an event, a queue task, or an answer. */
class Message {
  constructor(nativeMessage) {
    this._native = nativeMessage;
  }
  /** The sender's id for it (for a queue task: the task id to ack). */
  get id() { return this._native.id; }
  /** The agent that sent it (`$hub` for the hub's own messages). */
  get sender() { return this._native.sender; }
  /** Where it was sent: `agent:ID`, `topic:NAME`, `queue:NAME` or `*`. */
  get to() { return this._native.to; }
  /** `request`, `response`, `event`, `task`, `error`, … */
  get kind() { return this._native.kind; }
  /** `critical`, `high`, `medium` or `low`. */
  get priority() { return this._native.priority; }
  /** For an answer: the id of the request it answers. */
  get correlation() { return this._native.correlation ?? null; }
  /** Its headers. */
  get headers() { return this._native.headers; }
  /** Its bytes. */
  get body() { return this._native.body; }
  /** Its body as UTF-8 text. */
  get text() { return this._native.body.toString('utf8'); }
  /** Its body parsed as JSON. */
  json() { return JSON.parse(this.text); }
  /** For a queue task: its queue. */
  get queue() { return this._native.queue ?? null; }
  /** For a queue task: 1 for the first delivery, more for redeliveries. */
  get attempt() { return this._native.attempt ?? null; }
  /** Whether it expects `reply`. */
  get isRequest() { return this._native.kind === 'request'; }
  /** Answers this request with `body`. */
  reply(body) {
    return dispatch((c, t) => this._native.reply(c, t, bodyOf(body)));
  }
  toJSON() {
    return { id: this.id, sender: this.sender, to: this.to, kind: this.kind, priority: this.priority,
      correlation: this.correlation, headers: this.headers, body: this.text };
  }
}

function taskId(task) {
  return task instanceof Message ? task.id : task;
}

/** A connected agent. Get one with `connect`; use it from anywhere at once. */
class Agent {
  constructor(nativeAgent) {
    this._native = nativeAgent;
  }
  /** This agent's id. */
  get id() { return this._native.id; }
  /** The transport in use: `quic`, `http2`, `websocket` or `unix`. */
  get transport() { return this._native.transport; }

  /** Sends `body` to `to` (an agent id, `topic:NAME`, `queue:NAME` or `*`); resolves to its id. */
  send(to, body, { priority, kind = 'event', headers } = {}) {
    return dispatch((c, t) => this._native.send(c, t, text('to', to), bodyOf(body),
      text('kind', kind), priorityOf(priority), headersOf(headers)));
  }

  /** Sends a request to agent `to`; resolves to its answer (`{ body, sender, headers, … }`). */
  async request(to, body, { timeoutMs = 5000, priority, headers } = {}) {
    const answer = await dispatch((c, t) => this._native.request(c, t, text('to', to),
      bodyOf(body), milliseconds('timeoutMs', timeoutMs), priorityOf(priority),
      headersOf(headers)));
    return new Message(answer);
  }

  /** The next received message, or `null` once the connection has ended. */
  async recv() {
    const m = await dispatch((c, t) => this._native.recv(c, t));
    return m ? new Message(m) : null;
  }

  /** `for await (const msg of agent)`: every received message until the connection ends. */
  async *[Symbol.asyncIterator]() {
    for (;;) {
      const msg = await this.recv();
      if (msg === null) return;
      yield msg;
    }
  }

  /** Receives what is published to `topic` (`$presence`: joins and leaves). */
  subscribe(topic) { return invoke(() => this._native.subscribe(text('topic', topic))); }
  /** Stops receiving `topic`. */
  unsubscribe(topic) { return invoke(() => this._native.unsubscribe(text('topic', topic))); }
  /** Sends `body` as an event to every subscriber of `topic`; resolves to its id. */
  publish(topic, body) {
    return dispatch((c, t) => this._native.publish(c, t, text('topic', topic), bodyOf(body)));
  }

  /** Stores a task in work queue `queue`; resolves once the hub stored it. */
  /**
   * Publishes every body to `topic`, queued in one step so that the transport writes them
   * together (several to a QUIC stream); resolves to their ids in order. Nothing is sent when
   * one body is over the hub's frame limit.
   */
  publishMany(topic, bodies) {
    return invoke(() => {
      if (!Array.isArray(bodies)) throw new ConfigError(`bodies must be an array, not ${typeof bodies}`);
      return this._native.publishMany(text('topic', topic), bodies.map(bodyOf));
    });
  }

  async enqueue(queue, body, { producerId, timeoutMs = 10000 } = {}) {
    const [task, duplicate] = await invoke(() => this._native.enqueue(text('queue', queue),
      bodyOf(body), milliseconds('timeoutMs', timeoutMs),
      producerId === undefined ? undefined : text('producerId', producerId)));
    return { task, duplicate };
  }

  /** Takes tasks from `queue`, `credit` at a time (they arrive as messages of kind `task`). */
  consume(queue, { credit = 1 } = {}) {
    if (!Number.isInteger(credit) || credit < 1 || credit >= 2 ** 32) {
      return Promise.reject(new ConfigError(`credit must be a positive integer, not ${credit}`));
    }
    return invoke(() => this._native.consume(text('queue', queue), credit));
  }
  /** Takes no more tasks from `queue`. */
  stopConsuming(queue) { return invoke(() => this._native.stopConsuming(text('queue', queue))); }
  /** Marks a task (its id, or the message) done. */
  ack(task) { return invoke(() => this._native.ack(taskId(task))); }
  /** Gives a task back, delivered again after `delayMs` (the queue's backoff if left out). */
  nack(task, { delayMs } = {}) {
    return invoke(() => this._native.nack(taskId(task),
      delayMs === 0 ? 0 : milliseconds('delayMs', delayMs)));
  }
  /** A queue's counts: `ready`, `in_flight`, `dead`, `consumers`, … */
  async queueStats(queue, { timeoutMs = 5000 } = {}) {
    return JSON.parse(await invoke(() => this._native.queueStats(text('queue', queue),
      milliseconds('timeoutMs', timeoutMs))));
  }

  /** Counters: messages sent and received, and the connection's (RTT, bytes, lost packets). */
  stats() { return JSON.parse(this._native.statsJson()); }
  /** Why the connection ended, or `null` while it is open. */
  get closedReason() { return this._native.closedReason() ?? null; }
  /** Says goodbye to the hub and closes the connection. */
  close() { return invoke(() => this._native.close()); }
}

/**
 * Connects an agent. `hub`: an address (`quic://HOST:PORT`, `h2://`, `wss://`, `ws://`,
 * `unix:///PATH`, `auto://HOST:PORT`) or a list tried in order. Trust the hub with `ca` (a PEM
 * file), `caPem`, `pin` (`sha256:HEX`) or, for tests only, `insecure: true`.
 */
function connect(options) {
  return invoke(() => {
    if (!options || typeof options !== 'object') throw new ConfigError('connect takes an options object');
    const hubs = Array.isArray(options.hub) ? options.hub : [options.hub];
    return native.connect({
      hubs: hubs.map((h) => text('hub', h)),
      id: text('id', options.id),
      ca: options.ca,
      caPem: options.caPem,
      pin: options.pin,
      insecure: Boolean(options.insecure),
      token: options.token,
      cert: options.cert,
      key: options.key,
      role: options.role,
      serverName: options.serverName,
      connectTimeoutMs: milliseconds('connectTimeoutMs', options.connectTimeoutMs),
      fallbackTimeoutMs: milliseconds('fallbackTimeoutMs', options.fallbackTimeoutMs),
      codecs: options.codecs,
    });
  }).then((a) => new Agent(a));
}

/** A hub running inside this process (tests, demos, or an application with its own hub). */
class Hub {
  constructor(nativeHub) {
    this._native = nativeHub;
  }
  /** Listens on every address of `listen` (port 0 picks one); without `certDir` it makes its own CA. */
  static async start({ listen = ['quic://127.0.0.1:0'], certDir, token, store } = {}) {
    const addresses = Array.isArray(listen) ? listen : [listen];
    const h = await invoke(() => native.startHub(addresses.map((a) => text('listen', a)),
      certDir, token, store));
    return new Hub(h);
  }
  /** The addresses agents use, with the ports chosen. */
  get urls() { return this._native.urls; }
  /** The first address. */
  get url() { return this._native.urls[0]; }
  /** The hub's public-key pin, for `connect({ pin })`. */
  get pin() { return this._native.pin; }
  /** The CA it made for itself (PEM), for `connect({ caPem })`. */
  get caPem() { return this._native.caPem ?? null; }
  /** Agents connected now. */
  agentCount() { return this._native.agentCount(); }
  /** Stops the hub. */
  close() { this._native.close(); }
}

module.exports = {
  connect,
  Agent,
  Message,
  Hub,
  AgentwireError,
  ConfigError,
  ConnectError,
  RejectedError,
  RemoteError,
  TimeoutError,
  ClosedError,
  TooLargeError,
};
