// agentwire for web pages and Web Workers: an agent on a hub over WebTransport (the hub's
// QUIC port), or over WebSocket where WebTransport is missing or blocked. No dependencies.
//
//   import { connect } from 'agentwire-web';
//   const agent = await connect({ hub: ['wt://127.0.0.1:4433', 'wss://127.0.0.1:4433'], id: 'page-1',
//                                 serverCertificateHashes: ['7bdd…'] });
//   const answer = await agent.request('worker', 'hello');

export { connect, Agent, Message, parseAddress } from './agent.js';
export type { Attempt, Body, CertificateHash, ConnectOptions, Receipt, RequestOptions, SendOptions } from './agent.js';
export type { TransportName } from './link.js';
export type { Envelope, Kind, Priority, U64 } from './frames.js';
export {
  AgentwireError,
  ClosedError,
  ConfigError,
  ConnectError,
  ERROR_CODES,
  RejectedError,
  RemoteError,
  TimeoutError,
  TooLargeError,
} from './errors.js';
