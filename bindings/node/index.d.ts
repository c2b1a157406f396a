/// <reference types="node" />
// Types of agentwire for Node.js (index.js, index.mjs).

/** A message body: bytes as they are, a string as UTF-8. */
export type Body = Buffer | Uint8Array | string;
export type Priority = 'critical' | 'high' | 'medium' | 'low';

export interface ConnectOptions {
  /** An address (`quic://HOST:PORT`, `h2://`, `wss://`, `ws://`, `unix:///PATH`, `auto://`) or a list tried in order. */
  hub: string | string[];
  /** This agent's id. */
  id: string;
  /** PEM file of the CA that signed the hub's certificate. */
  ca?: string;
  /** The same CA as PEM text. */
  caPem?: string;
  /** The hub's public-key pin, `sha256:HEX`. */
  pin?: string;
  /** Accept any hub certificate (testing only; warns loudly). */
  insecure?: boolean;
  /** The hub's shared token, or this agent's credential. */
  token?: string;
  /** This agent's certificate and key files, for hubs that require one (mutual TLS). */
  cert?: string;
  key?: string;
  /** Role announced to the hub (default `agent`). */
  role?: string;
  /** TLS server name (default: the address's host). */
  serverName?: string;
  /** Time allowed for the whole connect (default 10000). */
  connectTimeoutMs?: number;
  /** With several addresses, time allowed for each (default 2000). */
  fallbackTimeoutMs?: number;
  /** Codecs offered, preferred first (`msgpack`, `json`). */
  codecs?: string[];
}

export interface SendOptions {
  priority?: Priority;
  /** `event` (default), `request`, `task`, … */
  kind?: string;
  headers?: Record<string, string>;
}

export interface RequestOptions {
  /** Default 5000. */
  timeoutMs?: number;
  priority?: Priority;
  headers?: Record<string, string>;
}

/** A received message: a request to answer, an event, a queue task, or an answer. */
export declare class Message {
  readonly id: number;
  readonly sender: string;
  readonly to: string;
  readonly kind: string;
  readonly priority: Priority;
  readonly correlation: number | null;
  readonly headers: Record<string, string>;
  readonly body: Buffer;
  readonly text: string;
  readonly queue: string | null;
  readonly attempt: number | null;
  readonly isRequest: boolean;
  json(): unknown;
  /** Answers this request with `body`. */
  reply(body: Body): Promise<void>;
}

export interface Receipt {
  task: number;
  duplicate: boolean;
}

export declare class Agent implements AsyncIterable<Message> {
  readonly id: string;
  readonly transport: 'quic' | 'http2' | 'websocket' | 'unix';
  readonly closedReason: string | null;
  send(to: string, body: Body, options?: SendOptions): Promise<number>;
  request(to: string, body: Body, options?: RequestOptions): Promise<Message>;
  recv(): Promise<Message | null>;
  [Symbol.asyncIterator](): AsyncIterator<Message>;
  subscribe(topic: string): Promise<void>;
  unsubscribe(topic: string): Promise<void>;
  publish(topic: string, body: Body): Promise<number>;
  /** Every body to `topic`, queued in one step (written together); their ids in order. */
  publishMany(topic: string, bodies: Body[]): Promise<number[]>;
  enqueue(queue: string, body: Body, options?: { producerId?: string; timeoutMs?: number }): Promise<Receipt>;
  consume(queue: string, options?: { credit?: number }): Promise<void>;
  stopConsuming(queue: string): Promise<void>;
  ack(task: number | Message): Promise<void>;
  nack(task: number | Message, options?: { delayMs?: number }): Promise<void>;
  queueStats(queue: string, options?: { timeoutMs?: number }): Promise<Record<string, unknown>>;
  stats(): Record<string, unknown>;
  close(): Promise<void>;
}

export declare function connect(options: ConnectOptions): Promise<Agent>;

export interface HubStartOptions {
  listen?: string | string[];
  certDir?: string;
  token?: string;
  store?: string;
}

export declare class Hub {
  static start(options?: HubStartOptions): Promise<Hub>;
  readonly urls: string[];
  readonly url: string;
  readonly pin: string;
  readonly caPem: string | null;
  agentCount(): number;
  close(): void;
}

export declare class AgentwireError extends Error {
  /** The protocol's error code number, if there is one. */
  readonly code: number | null;
  /** The protocol's error code name (`unauthorized`, `unknown-agent`, …), if there is one. */
  readonly codeName: string | null;
  constructor(message: string, code?: number | null, codeName?: string | null);
}
export declare class ConfigError extends AgentwireError {}
export declare class ConnectError extends AgentwireError {}
export declare class RejectedError extends AgentwireError {}
export declare class RemoteError extends AgentwireError {}
export declare class TimeoutError extends AgentwireError {}
export declare class ClosedError extends AgentwireError {}
export declare class TooLargeError extends AgentwireError {}
