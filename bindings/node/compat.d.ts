// Types of agentwire/compat: the method names of the best-known QUIC-transport-for-agents
// package, on agentwire.

/** The message shape that package sends. */
export interface AgentMessage {
  id: string;
  type: string;
  payload: unknown;
  metadata?: Record<string, unknown>;
}

export interface QuicTransportConfig {
  /** An agentwire hub address; else `quic://host:port`. */
  hub?: string;
  host?: string;
  port?: number;
  serverName?: string;
  /** This agent's id (default: a random one). */
  id?: string;
  /** PEM file of the hub's CA (`certPath` is accepted too). */
  ca?: string;
  certPath?: string;
  caPem?: string;
  pin?: string;
  insecure?: boolean;
  token?: string;
  cert?: string;
  key?: string;
  /** Bounds `receive` and `request` (default 30000). */
  maxIdleTimeoutMs?: number;
}

export interface PoolStatistics {
  active: number;
  idle: number;
  created: number;
  closed: number;
  [counter: string]: unknown;
}

export declare class QuicTransport {
  static create(config?: QuicTransportConfig): Promise<QuicTransport>;
  send(address: string, message: AgentMessage): Promise<void>;
  receive(address?: string): Promise<AgentMessage>;
  request(address: string, message: AgentMessage): Promise<AgentMessage>;
  sendBatch(address: string, messages: AgentMessage[]): Promise<void>;
  getStats(): Promise<PoolStatistics>;
  close(): Promise<void>;
}

export declare function loadQuicTransport(config?: QuicTransportConfig): Promise<QuicTransport>;
