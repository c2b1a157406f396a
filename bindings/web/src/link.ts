// What the agent needs of a transport, and the two a page has: WebTransport (the hub's QUIC
// port, ALPN h3: a control stream, a stream per message) and WebSocket (one ordered
// connection, one binary message per frame).
//
// A link moves frames; it must not decode envelopes or keep session state (agent.ts does).

import { FrameError, FrameReader, PRIORITIES, type Priority, type RawFrame } from './frames.js';

/** Where a request that arrived on a stream of its own is answered. */
export interface ReplyStream {
  /** Writes the answer's frame on the request's stream and ends it. */
  answer(frame: Uint8Array): Promise<void>;
  /** Ends the stream without an answer. */
  abandon(): void;
}

/** How a link hands over what it reads. */
export interface Inbound {
  /**
   * A frame from the hub, and the stream to answer it on when it came on a request stream.
   * A returned promise holds that stream's reading until it settles (back-pressure).
   */
  frame(f: RawFrame, reply?: ReplyStream): void | Promise<void>;
  /** The link ended: the hub's close code when it gave one, and why. */
  closed(code: number | null, reason: string): void;
}

/** The transports a page can land on. */
export type TransportName = 'webtransport' | 'websocket';

export interface Link {
  readonly transport: TransportName;
  /** Starts reading; `inbound` gets every frame from now on. */
  start(inbound: Inbound): void;
  /** A control frame (hello, subscribe, heartbeat, …), in order with the other control frames. */
  control(frame: Uint8Array): Promise<void>;
  /**
   * A heartbeat frame: on a datagram where the transport has them (lost now and then, which
   * the hub's miss limit allows for), else as a control frame. Resolves to whether it went
   * as a datagram.
   */
  heartbeat(frame: Uint8Array): Promise<boolean>;
  /** An envelope frame; `request`: its answer may come back on the same stream. */
  message(frame: Uint8Array, priority: Priority, request: boolean): Promise<void>;
  /** Several envelope frames (not requests) of one class, written together and in order. */
  messages(frames: Uint8Array[], priority: Priority): Promise<void>;
  /** The frame limit the handshake agreed on. */
  setMaxFrameSize(n: number): void;
  /** Closes with an agentwire error code (0: normal) and a reason. */
  close(code: number, reason: string): void;
}

/**
 * The bytes of frames that share one WebTransport stream in `messages`, as the Rust sender's
 * shared streams (about one loopback datagram): a loss holds back no more than that.
 */
const SHARED_STREAM_BYTES = 64 * 1024;

/** `frames` in runs of at most `limit` bytes, each run joined (a larger frame runs alone). */
export function joinFrames(frames: Uint8Array[], limit: number): Uint8Array[] {
  const runs: Uint8Array[] = [];
  let run: Uint8Array[] = [];
  let size = 0;
  const end = () => {
    if (run.length === 0) return;
    const joined = new Uint8Array(size);
    let at = 0;
    for (const f of run) {
      joined.set(f, at);
      at += f.length;
    }
    runs.push(joined);
    run = [];
    size = 0;
  };
  for (const f of frames) {
    if (size + f.length > limit) end();
    run.push(f);
    size += f.length;
  }
  end();
  return runs;
}

/** WebTransport's send order per class: higher goes first. Control frames outrank them all. */
const SEND_ORDER: Record<Priority, number> = { critical: 4, high: 3, medium: 2, low: 1 };

/** Reads whole frames from `readable` until it ends; throws a `FrameError` on bad bytes. */
async function readFrames(
  readable: ReadableStream<Uint8Array>,
  reader: FrameReader,
  each: (f: RawFrame) => void | Promise<void>,
): Promise<void> {
  const r = readable.getReader();
  try {
    for (;;) {
      const { value, done } = await r.read();
      if (done) break;
      reader.push(value);
      for (let f = reader.next(); f !== null; f = reader.next()) {
        const wait = each(f);
        if (wait) await wait;
      }
    }
    reader.finish();
  } finally {
    r.releaseLock();
  }
}

export interface WebTransportOptions {
  url: string;
  /** SHA-256 hashes of certificates to accept without a CA (each 32 bytes). */
  hashes: Uint8Array[];
  maxFrameSize: number;
}

/** A WebTransport session to the hub. */
export class WebTransportLink implements Link {
  readonly transport = 'webtransport';
  private maxFrameSize: number;
  private readonly writer: WritableStreamDefaultWriter<Uint8Array>;
  private datagrams: WritableStreamDefaultWriter<Uint8Array> | null = null;
  private inbound: Inbound | null = null;
  private ended = false;

  private constructor(
    private readonly wt: WebTransport,
    private readonly controlStream: WebTransportBidirectionalStream,
    maxFrameSize: number,
  ) {
    this.maxFrameSize = maxFrameSize;
    this.writer = controlStream.writable.getWriter();
  }

  /** Opens the session and its control stream; `signal` abandons the attempt. */
  static async open(o: WebTransportOptions, signal: AbortSignal): Promise<WebTransportLink> {
    if (typeof WebTransport === 'undefined') throw new Error('this browser has no WebTransport');
    const init: WebTransportOptions_ = {};
    if (o.hashes.length > 0) {
      init.serverCertificateHashes = o.hashes.map((h) => ({ algorithm: 'sha-256', value: new Uint8Array(h) }));
    }
    const wt = new WebTransport(o.url, init);
    const abort = () => wt.close();
    signal.addEventListener('abort', abort);
    try {
      await wt.ready;
      const control = await wt.createBidirectionalStream();
      return new WebTransportLink(wt, control, o.maxFrameSize);
    } catch (e) {
      wt.close();
      throw e;
    } finally {
      signal.removeEventListener('abort', abort);
    }
  }

  start(inbound: Inbound): void {
    this.inbound = inbound;
    this.read(this.controlStream.readable);
    void this.acceptUni();
    void this.acceptBidi();
    void this.drainDatagrams();
    this.wt.closed.then(
      (info) => this.end(info.closeCode ?? null, info.reason ?? 'session closed'),
      (e: unknown) => this.end(null, String((e as Error)?.message ?? e)),
    );
  }

  control(frame: Uint8Array): Promise<void> {
    return this.writer.write(frame);
  }

  async heartbeat(frame: Uint8Array): Promise<boolean> {
    const d = this.wt.datagrams as DatagramDuplex | undefined;
    // The browser puts the session's quarter stream id in front; the hub reads past it.
    if (d !== undefined && (d.maxDatagramSize ?? 0) >= frame.length) {
      try {
        this.datagrams ??= (typeof d.createWritable === 'function' ? d.createWritable() : d.writable).getWriter();
        await this.datagrams.write(frame);
        return true;
      } catch {
        this.datagrams = null;
      }
    }
    await this.control(frame);
    return false;
  }

  async message(frame: Uint8Array, priority: Priority, request: boolean): Promise<void> {
    const sendOrder = SEND_ORDER[priority];
    if (request) {
      const s = await this.wt.createBidirectionalStream({ sendOrder } as WebTransportSendStreamOptions);
      this.read(s.readable);
      const w = s.writable.getWriter();
      void w.write(frame).catch(() => {});
      await w.close();
      return;
    }
    const s = await this.wt.createUnidirectionalStream({ sendOrder } as WebTransportSendStreamOptions);
    const w = s.getWriter();
    void w.write(frame).catch(() => {});
    await w.close();
  }

  async messages(frames: Uint8Array[], priority: Priority): Promise<void> {
    const sendOrder = SEND_ORDER[priority];
    for (const run of joinFrames(frames, SHARED_STREAM_BYTES)) {
      const s = await this.wt.createUnidirectionalStream({ sendOrder } as WebTransportSendStreamOptions);
      const w = s.getWriter();
      void w.write(run).catch(() => {});
      await w.close();
    }
  }

  setMaxFrameSize(n: number): void {
    this.maxFrameSize = n;
  }

  close(code: number, reason: string): void {
    if (this.ended) return;
    this.wt.close({ closeCode: code, reason: reason.slice(0, 1024) });
  }

  /** Reads frames from one stream; bad bytes close the session with the matching code. */
  private read(readable: ReadableStream<Uint8Array>, reply?: ReplyStream): void {
    const frames = new FrameReader(this.maxFrameSize);
    readFrames(readable, frames, (f) => this.inbound?.frame(f, reply)).catch((e: unknown) => {
      if (e instanceof FrameError) {
        this.close(e.code, e.message);
        this.end(e.code, e.message);
      }
      // Anything else is the stream being reset or the session ending: `closed` says which.
    });
  }

  /** Reads and drops the hub's datagrams (heartbeats: any frame is a sign of life). */
  private async drainDatagrams(): Promise<void> {
    const d = this.wt.datagrams as DatagramDuplex | undefined;
    if (d === undefined) return;
    const r = d.readable.getReader();
    for (;;) {
      const { done } = await r.read().catch(() => ({ done: true as const }));
      if (done) return;
    }
  }

  private async acceptUni(): Promise<void> {
    const streams = this.wt.incomingUnidirectionalStreams.getReader();
    for (;;) {
      const { value, done } = await streams.read().catch(() => ({ value: undefined, done: true as const }));
      if (done || !value) return;
      this.read(value);
    }
  }

  /** The hub forwards each request to this agent on a bidirectional stream of its own. */
  private async acceptBidi(): Promise<void> {
    const streams = this.wt.incomingBidirectionalStreams.getReader();
    for (;;) {
      const { value, done } = await streams.read().catch(() => ({ value: undefined, done: true as const }));
      if (done || !value) return;
      const writer = value.writable.getWriter();
      let settled = false;
      const reply: ReplyStream = {
        answer: async (frame) => {
          if (settled) throw new Error('this request was answered already');
          settled = true;
          void writer.write(frame).catch(() => {});
          await writer.close();
        },
        abandon: () => {
          if (!settled) {
            settled = true;
            void writer.abort().catch(() => {});
          }
        },
      };
      this.read(value.readable, reply);
    }
  }

  private end(code: number | null, reason: string): void {
    if (this.ended) return;
    this.ended = true;
    this.inbound?.closed(code, reason);
  }
}

// The WebTransport constructor's options as lib.dom names them (older lib.dom versions lack
// some members).
interface WebTransportOptions_ {
  serverCertificateHashes?: { algorithm: string; value: BufferSource }[];
}

interface DatagramDuplex {
  readonly readable: ReadableStream<Uint8Array>;
  readonly writable: WritableStream<Uint8Array>;
  readonly maxDatagramSize?: number;
  createWritable?: () => WritableStream<Uint8Array>;
}

interface WebTransportSendStreamOptions {
  sendOrder?: number;
}

/** Bytes a WebSocket may hold unsent before the link keeps frames in its own class queues. */
const WS_HIGH_WATER = 256 * 1024;

/** A WebSocket connection to the hub: every frame one binary message, in order. */
export class WebSocketLink implements Link {
  readonly transport = 'websocket';
  private maxFrameSize: number;
  private inbound: Inbound | null = null;
  private ended = false;
  /** Frames waiting for room: control first, then critical … low. */
  private readonly queues: { frame: Uint8Array; sent: () => void; failed: (e: Error) => void }[][] = [[], [], [], [], []];
  private flushTimer: ReturnType<typeof setTimeout> | null = null;

  private constructor(private readonly ws: WebSocket, maxFrameSize: number) {
    this.maxFrameSize = maxFrameSize;
  }

  static open(url: string, maxFrameSize: number, signal: AbortSignal): Promise<WebSocketLink> {
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(url);
      ws.binaryType = 'arraybuffer';
      const abort = () => {
        ws.close();
        reject(signal.reason ?? new Error('aborted'));
      };
      signal.addEventListener('abort', abort);
      ws.onopen = () => {
        signal.removeEventListener('abort', abort);
        resolve(new WebSocketLink(ws, maxFrameSize));
      };
      ws.onclose = (ev) => {
        signal.removeEventListener('abort', abort);
        reject(new Error(`WebSocket to ${url} closed before it opened (code ${ev.code})`));
      };
    });
  }

  start(inbound: Inbound): void {
    this.inbound = inbound;
    this.ws.onmessage = (ev: MessageEvent) => {
      if (typeof ev.data === 'string') return this.fail(3, 'a text message');
      const frames = new FrameReader(this.maxFrameSize);
      frames.push(new Uint8Array(ev.data as ArrayBuffer));
      try {
        const f = frames.next();
        if (f === null || frames.buffered > 0) return this.fail(3, 'a message that is not exactly one frame');
        void inbound.frame(f);
      } catch (e) {
        if (e instanceof FrameError) return this.fail(e.code, e.message);
        throw e;
      }
    };
    this.ws.onclose = (ev: CloseEvent) => {
      const code = ev.code >= 4000 && ev.code < 5000 ? ev.code - 4000 : ev.code === 1000 ? 0 : null;
      this.end(code, ev.reason || `WebSocket closed (code ${ev.code})`);
    };
  }

  control(frame: Uint8Array): Promise<void> {
    return this.enqueue(0, frame);
  }

  async heartbeat(frame: Uint8Array): Promise<boolean> {
    await this.control(frame);
    return false;
  }

  message(frame: Uint8Array, priority: Priority): Promise<void> {
    return this.enqueue(1 + PRIORITIES.indexOf(priority), frame);
  }

  /** Each frame is one WebSocket message (the hub reads exactly one frame per message). */
  async messages(frames: Uint8Array[], priority: Priority): Promise<void> {
    await Promise.all(frames.map((f) => this.message(f, priority)));
  }

  setMaxFrameSize(n: number): void {
    this.maxFrameSize = n;
  }

  close(code: number, reason: string): void {
    if (this.ended) return;
    // Close reasons are at most 123 bytes; cut by characters well under that.
    this.ws.close(code === 0 ? 1000 : 4000 + code, reason.slice(0, 60));
  }

  private enqueue(class_: number, frame: Uint8Array): Promise<void> {
    if (this.ended || this.ws.readyState !== WebSocket.OPEN) return Promise.reject(new Error('the WebSocket is closed'));
    return new Promise((sent, failed) => {
      this.queues[class_].push({ frame, sent, failed });
      this.flush();
    });
  }

  private flush(): void {
    this.flushTimer = null;
    for (const q of this.queues) {
      while (q.length > 0) {
        if (this.ws.bufferedAmount > WS_HIGH_WATER || this.ws.readyState !== WebSocket.OPEN) {
          if (this.ws.readyState === WebSocket.OPEN && this.flushTimer === null) {
            this.flushTimer = setTimeout(() => this.flush(), 2);
          }
          return;
        }
        const next = q.shift()!;
        this.ws.send(next.frame);
        next.sent();
      }
    }
  }

  private fail(code: number, reason: string): void {
    this.close(code, reason);
    this.end(code, reason);
  }

  private end(code: number | null, reason: string): void {
    if (this.ended) return;
    this.ended = true;
    if (this.flushTimer !== null) clearTimeout(this.flushTimer);
    for (const q of this.queues) {
      for (const waiting of q) waiting.failed(new Error(`the WebSocket closed: ${reason}`));
      q.length = 0;
    }
    this.inbound?.closed(code, reason);
  }
}
