// The errors the SDK throws: one class per way a call can fail, each carrying the protocol's
// error code (docs/protocol.md, "Error codes") when there is one. The same classes and names
// as the Node SDK.

/** The protocol's error codes by number. */
export const ERROR_CODES: readonly string[] = [
  'normal',
  'protocol-violation',
  'frame-too-large',
  'malformed-frame',
  'unsupported-version',
  'unauthorized',
  'duplicate-agent-id',
  'liveness-timeout',
  'handshake-timeout',
  'limit-exceeded',
  'unknown-agent',
  'queue-full',
  'replaced',
  'no-common-codec',
  'internal',
  'expired',
  'shutting-down',
  'invalid-agent-id',
  'cancelled',
];

/** The name of error code `code` (`protocol-violation` for a number this version does not know). */
export function codeName(code: number): string {
  return ERROR_CODES[code] ?? 'protocol-violation';
}

/** Any agentwire failure. `code`/`codeName`: the protocol's error code, if there is one. */
export class AgentwireError extends Error {
  /** The protocol's error code number, if there is one. */
  readonly code: number | null;
  /** The protocol's error code name (`unauthorized`, `unknown-agent`, …), if there is one. */
  readonly codeName: string | null;

  constructor(message: string, code: number | null = null, name: string | null = null, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
    this.code = code;
    this.codeName = name ?? (code === null ? null : codeName(code));
  }
}

/** Bad options or arguments (nothing was sent). */
export class ConfigError extends AgentwireError {}
/** No session could be opened (every address was tried; `cause` says why the last failed). */
export class ConnectError extends AgentwireError {}
/** The hub refused the agent (`codeName`: `unauthorized`, `duplicate-agent-id`, …). */
export class RejectedError extends AgentwireError {}
/** The hub or the peer answered with an error (`codeName`: `unknown-agent`, …). */
export class RemoteError extends AgentwireError {}
/** No answer in time. */
export class TimeoutError extends AgentwireError {}
/** The session is closed (`codeName`: why, when the hub said). */
export class ClosedError extends AgentwireError {}
/** A message over the session's frame limit. */
export class TooLargeError extends AgentwireError {}
