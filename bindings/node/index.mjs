// ES module entry: the same API as index.js (one copy of the code, loaded through require).
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const agentwire = require('./index.js');

export const {
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
} = agentwire;
export default agentwire;
