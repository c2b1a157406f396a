// MessagePack, the part of it agentwire's frames use: nil, booleans, unsigned and signed
// integers (64-bit ones as `bigint` when they do not fit a double exactly), floats, strings,
// binary, arrays and maps. Encoding follows docs/protocol.md's rules (shortest integer and
// string forms); decoding accepts every form a value may take, and refuses lengths longer
// than the bytes left and nesting deeper than `MAX_DEPTH`, so a hostile frame costs no more
// memory than its own size.
//
// This module owns bytes <-> values; it must not know frames or envelopes.

/** A MessagePack value. Maps keep their keys' order and may hold any key type. */
export type Value =
  | null
  | boolean
  | number
  | bigint
  | string
  | Uint8Array
  | Value[]
  | Map<Value, Value>;

/** Nesting a decoder follows at most (an envelope needs 3). */
export const MAX_DEPTH = 16;

/** Bytes that are not the MessagePack the protocol needs. */
export class MsgpackError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'MsgpackError';
  }
}

const utf8 = new TextEncoder();
const fromUtf8 = new TextDecoder('utf-8', { fatal: true });
const TWO_32 = 2 ** 32;

/** Appends to a growing buffer. */
class Writer {
  private buf = new Uint8Array(64);
  private view = new DataView(this.buf.buffer);
  len = 0;

  private room(n: number): void {
    if (this.len + n <= this.buf.length) return;
    let size = this.buf.length * 2;
    while (size < this.len + n) size *= 2;
    const next = new Uint8Array(size);
    next.set(this.buf.subarray(0, this.len));
    this.buf = next;
    this.view = new DataView(next.buffer);
  }

  u8(v: number): void {
    this.room(1);
    this.buf[this.len++] = v;
  }

  u16(v: number): void {
    this.room(2);
    this.view.setUint16(this.len, v);
    this.len += 2;
  }

  u32(v: number): void {
    this.room(4);
    this.view.setUint32(this.len, v);
    this.len += 4;
  }

  u64(v: bigint): void {
    this.room(8);
    this.view.setBigUint64(this.len, v);
    this.len += 8;
  }

  bytes(b: Uint8Array): void {
    this.room(b.length);
    this.buf.set(b, this.len);
    this.len += b.length;
  }

  finish(): Uint8Array {
    return this.buf.slice(0, this.len);
  }
}

function writeUint(w: Writer, n: number | bigint): void {
  if (typeof n === 'bigint') {
    if (n < 0n || n >= 1n << 64n) throw new MsgpackError(`integer ${n} is out of range`);
    if (n < BigInt(Number.MAX_SAFE_INTEGER)) return writeUint(w, Number(n));
    w.u8(0xcf);
    w.u64(n);
    return;
  }
  if (!Number.isSafeInteger(n) || n < 0) {
    throw new MsgpackError(`${n} is not an unsigned integer this encoder writes`);
  }
  if (n < 0x80) w.u8(n);
  else if (n < 0x100) {
    w.u8(0xcc);
    w.u8(n);
  } else if (n < 0x10000) {
    w.u8(0xcd);
    w.u16(n);
  } else if (n < TWO_32) {
    w.u8(0xce);
    w.u32(n);
  } else {
    w.u8(0xcf);
    w.u64(BigInt(n));
  }
}

function writeLen(w: Writer, n: number, fix: number, fixMax: number, op8: number | null, op16: number, op32: number): void {
  if (n < fixMax) w.u8(fix | n);
  else if (op8 !== null && n < 0x100) {
    w.u8(op8);
    w.u8(n);
  } else if (n < 0x10000) {
    w.u8(op16);
    w.u16(n);
  } else {
    w.u8(op32);
    w.u32(n);
  }
}

function writeValue(w: Writer, v: Value): void {
  if (v === null) w.u8(0xc0);
  else if (v === false) w.u8(0xc2);
  else if (v === true) w.u8(0xc3);
  else if (typeof v === 'number' || typeof v === 'bigint') writeUint(w, v);
  else if (typeof v === 'string') {
    const b = utf8.encode(v);
    writeLen(w, b.length, 0xa0, 32, 0xd9, 0xda, 0xdb);
    w.bytes(b);
  } else if (v instanceof Uint8Array) {
    if (v.length < 0x100) {
      w.u8(0xc4);
      w.u8(v.length);
    } else if (v.length < 0x10000) {
      w.u8(0xc5);
      w.u16(v.length);
    } else {
      w.u8(0xc6);
      w.u32(v.length);
    }
    w.bytes(v);
  } else if (Array.isArray(v)) {
    writeLen(w, v.length, 0x90, 16, null, 0xdc, 0xdd);
    for (const item of v) writeValue(w, item);
  } else if (v instanceof Map) {
    writeLen(w, v.size, 0x80, 16, null, 0xde, 0xdf);
    for (const [k, item] of v) {
      writeValue(w, k);
      writeValue(w, item);
    }
  } else {
    throw new MsgpackError(`cannot encode ${typeof v}`);
  }
}

/** Encodes `v` with the shortest forms. */
export function encode(v: Value): Uint8Array {
  const w = new Writer();
  writeValue(w, v);
  return w.finish();
}

/** Reads values out of a buffer. */
class Reader {
  private readonly view: DataView;
  pos = 0;

  constructor(private readonly buf: Uint8Array) {
    this.view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  }

  private need(n: number): void {
    if (this.pos + n > this.buf.length) {
      throw new MsgpackError(`${n} bytes needed at offset ${this.pos}, ${this.buf.length - this.pos} left`);
    }
  }

  u8(): number {
    this.need(1);
    return this.buf[this.pos++];
  }

  u16(): number {
    this.need(2);
    const v = this.view.getUint16(this.pos);
    this.pos += 2;
    return v;
  }

  u32(): number {
    this.need(4);
    const v = this.view.getUint32(this.pos);
    this.pos += 4;
    return v;
  }

  u64(): number | bigint {
    this.need(8);
    const v = this.view.getBigUint64(this.pos);
    this.pos += 8;
    return v <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(v) : v;
  }

  i64(): number | bigint {
    this.need(8);
    const v = this.view.getBigInt64(this.pos);
    this.pos += 8;
    return v <= BigInt(Number.MAX_SAFE_INTEGER) && v >= BigInt(Number.MIN_SAFE_INTEGER) ? Number(v) : v;
  }

  take(n: number): Uint8Array {
    this.need(n);
    const out = this.buf.subarray(this.pos, this.pos + n);
    this.pos += n;
    return out;
  }

  str(n: number): string {
    try {
      return fromUtf8.decode(this.take(n));
    } catch (e) {
      if (e instanceof MsgpackError) throw e;
      throw new MsgpackError(`a string at offset ${this.pos - n} is not UTF-8`);
    }
  }

  /** A count of items that each take at least one byte: never more than the bytes left. */
  count(n: number): number {
    if (n > this.buf.length - this.pos) {
      throw new MsgpackError(`${n} items announced at offset ${this.pos}, ${this.buf.length - this.pos} bytes left`);
    }
    return n;
  }

  value(depth: number): Value {
    if (depth > MAX_DEPTH) throw new MsgpackError(`nested deeper than ${MAX_DEPTH}`);
    const b = this.u8();
    if (b < 0x80) return b;
    if (b >= 0xe0) return b - 0x100;
    if (b >= 0xa0 && b <= 0xbf) return this.str(b & 0x1f);
    if (b >= 0x90 && b <= 0x9f) return this.array(b & 0x0f, depth);
    if (b >= 0x80 && b <= 0x8f) return this.map(b & 0x0f, depth);
    switch (b) {
      case 0xc0:
        return null;
      case 0xc2:
        return false;
      case 0xc3:
        return true;
      case 0xc4:
        return this.take(this.u8()).slice();
      case 0xc5:
        return this.take(this.u16()).slice();
      case 0xc6:
        return this.take(this.u32()).slice();
      case 0xca: {
        this.need(4);
        const v = this.view.getFloat32(this.pos);
        this.pos += 4;
        return v;
      }
      case 0xcb: {
        this.need(8);
        const v = this.view.getFloat64(this.pos);
        this.pos += 8;
        return v;
      }
      case 0xcc:
        return this.u8();
      case 0xcd:
        return this.u16();
      case 0xce:
        return this.u32();
      case 0xcf:
        return this.u64();
      case 0xd0:
        return (this.u8() << 24) >> 24;
      case 0xd1:
        return (this.u16() << 16) >> 16;
      case 0xd2:
        return this.u32() | 0;
      case 0xd3:
        return this.i64();
      case 0xd9:
        return this.str(this.u8());
      case 0xda:
        return this.str(this.u16());
      case 0xdb:
        return this.str(this.u32());
      case 0xdc:
        return this.array(this.u16(), depth);
      case 0xdd:
        return this.array(this.u32(), depth);
      case 0xde:
        return this.map(this.u16(), depth);
      case 0xdf:
        return this.map(this.u32(), depth);
      default:
        throw new MsgpackError(`type byte 0x${b.toString(16)} at offset ${this.pos - 1} is not used by agentwire`);
    }
  }

  private array(n: number, depth: number): Value[] {
    const out: Value[] = new Array(this.count(n));
    for (let i = 0; i < n; i++) out[i] = this.value(depth + 1);
    return out;
  }

  private map(n: number, depth: number): Map<Value, Value> {
    const out = new Map<Value, Value>();
    for (let i = 0, len = this.count(n); i < len; i++) {
      const k = this.value(depth + 1);
      out.set(k, this.value(depth + 1));
    }
    return out;
  }
}

/** Decodes exactly one value filling `bytes`. */
export function decode(bytes: Uint8Array): Value {
  const r = new Reader(bytes);
  const v = r.value(0);
  if (r.pos !== bytes.length) throw new MsgpackError(`${bytes.length - r.pos} bytes after the value`);
  return v;
}
