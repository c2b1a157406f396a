'use strict';
// A compatibility layer with the method names of the best-known "QUIC transport for agents"
// Node package (its QuicTransport / loadQuicTransport: send, receive, request, sendBatch,
// getStats, close), on a real agentwire agent. Moving over is one line:
//
//   const { loadQuicTransport } = require('agentwire/compat');
//   const transport = await loadQuicTransport({ hub: 'quic://127.0.0.1:4433', id: 'me', ca: 'certs/ca.pem' });
//
// Their `address` (a host:port) becomes the peer agent's id: messages go through the hub.
// Messages are objects ({ id, type, payload, metadata }) carried as JSON bodies.

const agentwire = require('./index.js');

function encode(message) {
  return JSON.stringify(message);
}

function decode(msg) {
  try {
    return JSON.parse(msg.text);
  } catch {
    return { id: String(msg.id), type: msg.kind, payload: msg.text };
  }
}

class QuicTransport {
  constructor(agent, config) {
    this.agent = agent;
    this.config = config;
    /** Messages received but not yet asked for, by sender. */
    this.waiting = new Map();
    /** Requests received (by sender) that the next `send` to that sender answers. */
    this.unanswered = new Map();
    this.readers = [];
    this.reading = this.pump();
  }

  /**
   * Connects. `config`: `hub` (or `host` + `port`, QUIC), `id`, and how to trust the hub
   * (`ca`/`certPath`, `caPem`, `pin`, `insecure`); `maxIdleTimeoutMs` bounds `receive`.
   */
  static async create(config = {}) {
    const hub = config.hub ?? `quic://${config.host ?? config.serverName ?? 'localhost'}:${config.port ?? 4433}`;
    const agent = await agentwire.connect({
      hub,
      id: config.id ?? `agent-${process.pid}-${Math.random().toString(36).slice(2, 8)}`,
      ca: config.ca ?? config.certPath,
      caPem: config.caPem,
      pin: config.pin,
      insecure: config.insecure,
      token: config.token,
      cert: config.cert,
      key: config.key,
    });
    return new QuicTransport(agent, config);
  }

  async pump() {
    for await (const msg of this.agent) {
      const from = msg.sender;
      if (msg.isRequest) {
        if (!this.unanswered.has(from)) this.unanswered.set(from, []);
        this.unanswered.get(from).push(msg);
      }
      const i = this.readers.findIndex((r) => r.from === undefined || r.from === from);
      if (i >= 0) {
        const [reader] = this.readers.splice(i, 1);
        reader.resolve(decode(msg));
        continue;
      }
      if (!this.waiting.has(from)) this.waiting.set(from, []);
      this.waiting.get(from).push(msg);
    }
    for (const reader of this.readers.splice(0)) {
      reader.reject(new agentwire.ClosedError('the connection ended'));
    }
  }

  /** Sends `message` to agent `address`; answers that agent's oldest unanswered request if it has one. */
  async send(address, message) {
    const pending = this.unanswered.get(address);
    if (pending && pending.length > 0) {
      await pending.shift().reply(encode(message));
      return;
    }
    await this.agent.send(address, encode(message));
  }

  /** The next message from agent `address` (from anyone when left out). */
  receive(address) {
    for (const [from, queue] of this.waiting) {
      if ((address === undefined || from === address) && queue.length > 0) {
        return Promise.resolve(decode(queue.shift()));
      }
    }
    return new Promise((resolve, reject) => {
      const reader = { from: address, resolve, reject };
      const ms = this.config.maxIdleTimeoutMs ?? 30000;
      const timer = setTimeout(() => {
        const i = this.readers.indexOf(reader);
        if (i >= 0) this.readers.splice(i, 1);
        reject(new agentwire.TimeoutError(`Receive timeout from ${address ?? 'any agent'}`));
      }, ms);
      reader.resolve = (v) => { clearTimeout(timer); resolve(v); };
      reader.reject = (e) => { clearTimeout(timer); reject(e); };
      this.readers.push(reader);
    });
  }

  /** Sends `message` to agent `address` as a request and resolves to its answer. */
  async request(address, message) {
    const answer = await this.agent.request(address, encode(message), {
      timeoutMs: this.config.maxIdleTimeoutMs ?? 30000,
    });
    return decode(answer);
  }

  /** Sends every message to `address`. */
  async sendBatch(address, messages) {
    await Promise.all(messages.map((m) => this.send(address, m)));
  }

  /** `{ active, idle, created, closed }` as that package reports, plus agentwire's counters. */
  async getStats() {
    const open = this.agent.closedReason === null;
    return { active: open ? 1 : 0, idle: 0, created: 1, closed: open ? 0 : 1, ...this.agent.stats() };
  }

  async close() {
    await this.agent.close();
    await this.reading;
  }
}

/** `QuicTransport.create(config)`: agentwire's QUIC is real, so there is no fallback to pick. */
function loadQuicTransport(config = {}) {
  return QuicTransport.create(config);
}

module.exports = { QuicTransport, loadQuicTransport };
