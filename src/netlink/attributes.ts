/**
 * Netlink attributes (struct nlattr, linux/netlink.h): {nla_len u16, nla_type u16} then the
 * payload, padded to 4 bytes; nla_len counts header and payload but not the padding.
 *
 * Two levels, one walk:
 * - AttributeCursor: the walk every decoder uses (mdlayher/netlink's AttributeDecoder without
 *   copies); iterateAttributes: raw TLVs, for the few places that need them. Encoding is the
 *   other way round, in place into one buffer: AttributeWriter (./writer.ts).
 * - Codecs and schemas, whose value readers the cursor reads with: a family describes its attributes as a table
 *   `{ name: { type: WGDEVICE_A_IFNAME, codec: string } }`; encodeAttributes/decodeAttributes turn
 *   typed objects into bytes and back; each codec writes its payload straight into the writer. Nested codecs set NLA_F_NESTED, which strict kernel
 *   parsers (nla_parse_nested, used by WireGuard) require.
 */
import { NLA_F_NESTED, NLA_F_NET_BYTEORDER, NLA_HDRLEN, NLA_TYPE_MASK } from './constants';
import { NetlinkProtocolError } from './errors';
import { AttributeWriter } from './writer';

export { AttributeWriter } from './writer';

export interface RawAttribute {
  /** nla_type without the NLA_F_NESTED / NLA_F_NET_BYTEORDER bits. */
  type: number;
  nested: boolean;
  data: Buffer;
}

/**
 * A cursor over the attributes of buffer[from..to), as mdlayher/netlink's AttributeDecoder walks
 * them but without a copy: `next()` steps to the next attribute and exposes its type (without
 * NLA_F_NESTED / NLA_F_NET_BYTEORDER) and payload range; `value(codec, name)` reads the payload
 * in place with the codec's reader; `enter(into)` walks a nested attribute's payload. Every
 * decoder here walks attributes with it: the table codec (decodeAttributes) and the hand-written
 * hot path of the WireGuard dump, which reads the same codecs.
 *
 * Checks as the kernel's nla_ok does: a header shorter than 4 bytes or claiming more than
 * remains throws NetlinkProtocolError, so malformed input never loops or reads past the end;
 * trailing bytes shorter than a header are tolerated when zero (the kernel warns about them).
 * This is the hot loop of every dump (a 10,000-peer WireGuard device is ~100,000 attributes):
 * it allocates nothing.
 */
export class AttributeCursor {
  /** The current attribute: its type, whether NLA_F_NESTED is set, and its payload's range. */
  type = 0;
  nested = false;
  start = 0;
  end = 0;
  private offset: number;
  private limit: number;

  constructor(
    public buffer: Buffer = EMPTY,
    from = 0,
    to = buffer.length,
  ) {
    this.offset = from;
    this.limit = to;
  }

  /** Starts over on buffer[from..to) (a cursor kept for reuse). */
  reset(buffer: Buffer, from: number, to: number): this {
    this.buffer = buffer;
    this.offset = from;
    this.limit = to;
    return this;
  }

  /** Steps to the next attribute; false at the end. */
  next(): boolean {
    const buffer = this.buffer;
    const offset = this.offset;
    const remaining = this.limit - offset;
    if (remaining <= 0) return false;
    if (remaining < NLA_HDRLEN) {
      for (let i = offset; i < this.limit; i++) {
        if (buffer[i] !== 0) {
          throw new NetlinkProtocolError(`${remaining} stray bytes after the last attribute`);
        }
      }
      this.offset = this.limit;
      return false;
    }
    // Little-endian u16s read by hand: offsets are in bounds (checked above), and
    // Buffer#readUInt16LE would check its argument again for each of ~100,000 attributes.
    const length = buffer[offset]! | (buffer[offset + 1]! << 8);
    const rawType = buffer[offset + 2]! | (buffer[offset + 3]! << 8);
    if (length < NLA_HDRLEN || length > remaining) {
      throw new NetlinkProtocolError(
        `attribute at offset ${offset} has length ${length}, ${remaining} bytes remain`,
      );
    }
    this.type = rawType & NLA_TYPE_MASK;
    this.nested = (rawType & NLA_F_NESTED) !== 0;
    this.start = offset + NLA_HDRLEN;
    this.end = offset + length;
    this.offset = offset + ((length + 3) & ~3); // NLA_ALIGN
    return true;
  }

  /** The current attribute's payload length. */
  get length(): number {
    return this.end - this.start;
  }

  /**
   * Where the current payload starts, once checked to be exactly `size` bytes (a fixed-width
   * value, read there by its codec's `read`); `name` names it in the error. Hot decoders call
   * each codec's reader at a call site of its own, which V8 can inline, where `value` makes
   * one call site serve every codec.
   */
  at(size: number, name: string): number {
    exactLength(this.end - this.start, size, name);
    return this.start;
  }

  /** The current attribute's value; `name` names it in errors. */
  value<T>(codec: Codec<T>, name: string): T {
    return codec.decodeRange
      ? codec.decodeRange(this.buffer, this.start, this.end, name)
      : codec.decode(this.buffer.subarray(this.start, this.end), name);
  }

  /** `into`, reset to walk the current attribute's payload (a nested attribute's members). */
  enter(into: AttributeCursor): AttributeCursor {
    return into.reset(this.buffer, this.start, this.end);
  }
}

const EMPTY = Buffer.alloc(0);

/**
 * Calls `visit(type, nested, start, end)` for each attribute in data[from..to), where
 * data[start..end) is the payload (an AttributeCursor's walk, for callers that want a callback).
 */
export function forEachAttribute(
  data: Buffer,
  visit: (type: number, nested: boolean, start: number, end: number) => void,
  from = 0,
  to = data.length,
): void {
  const cursor = new AttributeCursor(data, from, to);
  while (cursor.next()) visit(cursor.type, cursor.nested, cursor.start, cursor.end);
}

/** The attributes in `data` as a list (for tests and the few places that need raw TLVs). */
export function iterateAttributes(data: Buffer): RawAttribute[] {
  const attributes: RawAttribute[] = [];
  forEachAttribute(data, (type, isNested, start, end) =>
    attributes.push({ type, nested: isNested, data: data.subarray(start, end) }),
  );
  return attributes;
}

/** Turns one attribute payload into a value and back. */
export interface Codec<T> {
  /** Whether attributes of this codec carry NLA_F_NESTED. */
  readonly nested: boolean;
  /** Whether attributes of this codec carry NLA_F_NET_BYTEORDER (never required by our kernels). */
  readonly netByteOrder?: boolean;
  /** Writes `value`'s payload at the writer's end (the attribute's header is the caller's). */
  write(writer: AttributeWriter, value: T): void;
  /** `where` names the attribute for error messages. */
  decode(data: Buffer, where: string): T;
  /**
   * Decodes buffer[start..end) in place. Scalars implement it so the hot decoding loop does not
   * allocate a Buffer view per attribute; codecs without it get a subarray.
   */
  decodeRange?(buffer: Buffer, start: number, end: number, where: string): T;
}

/** A value of one width: `read` takes it from any offset whose range the caller checked. */
export interface FixedCodec<T> extends Codec<T> {
  readonly size: number;
  read(buffer: Buffer, offset: number): T;
}

export type ValueOf<C> = C extends Codec<infer T> ? T : never;

function exactLength(length: number, size: number, where: string): void {
  if (length !== size) {
    throw new NetlinkProtocolError(`${where}: expected ${size} bytes, got ${length}`);
  }
}

/** A value's payload as bytes of its own (tests, and the few callers that keep a payload). */
export function encodeValue<T>(codec: Codec<T>, value: T): Buffer {
  const writer = new AttributeWriter();
  codec.write(writer, value);
  return writer.toBuffer();
}

/**
 * A value of fixed width (scalars, keys, small structs read field by field): written in place
 * into `size` zeroed bytes at `offset`, decoded in place from any range of exactly that length.
 */
export function fixedWidth<T>(
  size: number,
  write: (buffer: Buffer, offset: number, value: T) => void,
  read: (buffer: Buffer, offset: number) => T,
): FixedCodec<T> {
  return {
    nested: false,
    size,
    read,
    write(writer, value) {
      const at = writer.reserve(size);
      write(writer.buffer, at, value);
    },
    decode(data, where) {
      exactLength(data.length, size, where);
      return read(data, 0);
    },
    decodeRange(buffer, start, end, where) {
      exactLength(end - start, size, where);
      return read(buffer, start);
    },
  };
}

// Host byte order is little-endian on every platform this daemon targets (x86-64, arm64).
export const u8 = fixedWidth<number>(
  1,
  (b, o, v) => b.writeUInt8(v, o),
  (b, o) => b.readUInt8(o),
);
export const u16 = fixedWidth<number>(
  2,
  (b, o, v) => b.writeUInt16LE(v, o),
  // By hand: `read` gets an offset its caller checked, and readUInt16LE checks it again.
  (b, o) => b[o]! | (b[o + 1]! << 8),
);
export const u32 = fixedWidth<number>(
  4,
  (b, o, v) => b.writeUInt32LE(v >>> 0, o),
  (b, o) => b.readUInt32LE(o),
);
export const s32 = fixedWidth<number>(
  4,
  (b, o, v) => b.writeInt32LE(v, o),
  (b, o) => b.readInt32LE(o),
);
export const u64 = fixedWidth<bigint>(
  8,
  (b, o, v) => b.writeBigUInt64LE(v, o),
  (b, o) => b.readBigUInt64LE(o),
);
// Network byte order, as nf_tables and a few tc fields use.
export const be16 = fixedWidth<number>(
  2,
  (b, o, v) => b.writeUInt16BE(v, o),
  (b, o) => b.readUInt16BE(o),
);
export const be32 = fixedWidth<number>(
  4,
  (b, o, v) => b.writeUInt32BE(v >>> 0, o),
  (b, o) => b.readUInt32BE(o),
);
export const be64 = fixedWidth<bigint>(
  8,
  (b, o, v) => b.writeBigUInt64BE(v, o),
  (b, o) => b.readBigUInt64BE(o),
);

/** NUL-terminated string (NLA_NUL_STRING / NLA_STRING); decoding stops at the first NUL. */
export const string: Codec<string> = {
  nested: false,
  write(writer, value) {
    // The NUL is the zero the writer's buffer already holds.
    const at = writer.reserve(Buffer.byteLength(value, 'utf8') + 1);
    writer.buffer.write(value, at, 'utf8');
  },
  decode(data) {
    const end = data.indexOf(0);
    return data.toString('utf8', 0, end === -1 ? data.length : end);
  },
  decodeRange(buffer, start, end) {
    const nul = buffer.indexOf(0, start);
    return buffer.toString('utf8', start, nul === -1 || nul > end ? end : nul);
  },
};

/** Opaque bytes (NLA_BINARY). Decoded buffers are copies, not views into the datagram. */
export const bytes: Codec<Buffer> = {
  nested: false,
  write(writer, value) {
    writer.bytes(value);
  },
  decode(data) {
    return Buffer.from(data);
  },
};

/** Exactly `size` opaque bytes, such as a WireGuard key. */
export function fixedBytes(size: number): Codec<Buffer> {
  return {
    nested: false,
    write(writer, value) {
      if (value.length !== size) {
        throw new NetlinkProtocolError(`expected ${size} bytes to encode, got ${value.length}`);
      }
      writer.bytes(value);
    },
    decode(data, where) {
      exactLength(data.length, size, where);
      return Buffer.from(data);
    },
  };
}

/** A zero-length attribute whose presence is the value (NLA_FLAG). */
export const flag: Codec<true> = {
  nested: false,
  write() {
    // presence alone: no payload
  },
  decode() {
    return true;
  },
};

/** An attribute table: property name → attribute type and codec. */
export interface AttributeSpec<T> {
  type: number;
  codec: Codec<T>;
}
// Codec<T> uses method syntax, so its parameter is bivariant and every Codec<X> fits here.
export type Schema = Record<string, AttributeSpec<unknown>>;

export type Attributes<S extends Schema> = {
  [K in keyof S]?: ValueOf<S[K]['codec']>;
};

/** Keeps the literal types of a schema table while checking its shape. */
export function schema<S extends Schema>(table: S): S {
  return table;
}

/** A table's attributes in its order, with their header flags: made once per table. */
interface WriteEntry {
  name: string;
  type: number;
  flags: number;
  codec: Codec<unknown>;
}
const writeOrderCache = new WeakMap<Schema, WriteEntry[]>();

function writeOrder(table: Schema): WriteEntry[] {
  let order = writeOrderCache.get(table);
  if (!order) {
    order = Object.keys(table).map((name) => {
      const { type, codec } = table[name]!;
      const flags =
        (codec.nested ? NLA_F_NESTED : 0) | (codec.netByteOrder ? NLA_F_NET_BYTEORDER : 0);
      return { name, type, flags, codec };
    });
    writeOrderCache.set(table, order);
  }
  return order;
}

/** Writes the defined properties of `values`, in the table's order, each in place. */
export function writeAttributes<S extends Schema>(
  writer: AttributeWriter,
  table: S,
  values: Attributes<S>,
): AttributeWriter {
  const record = values as Record<string, unknown>;
  for (const entry of writeOrder(table)) {
    const value = record[entry.name];
    if (value === undefined) continue;
    const start = writer.begin(entry.type, entry.flags);
    entry.codec.write(writer, value);
    writer.end(start);
  }
  return writer;
}

export function encodeAttributes<S extends Schema>(table: S, values: Attributes<S>): Buffer {
  return writeAttributes(new AttributeWriter(), table, values).toBuffer();
}

/** Index of a table by attribute type, built once per table. */
const byTypeCache = new WeakMap<Schema, Map<number, [string, AttributeSpec<unknown>]>>();

function indexByType(table: Schema): Map<number, [string, AttributeSpec<unknown>]> {
  let index = byTypeCache.get(table);
  if (!index) {
    index = new Map(Object.entries(table).map(([name, spec]) => [spec.type, [name, spec]]));
    byTypeCache.set(table, index);
  }
  return index;
}

/** Prefixes a decoding error with where it happened, on the error path only. */
export function located(error: unknown, where: string): unknown {
  return error instanceof NetlinkProtocolError
    ? new NetlinkProtocolError(`${where}.${error.message}`)
    : error;
}

/**
 * Decodes every attribute the table knows; unknown types are skipped (newer kernels add
 * attributes) without even being sliced. A repeated attribute keeps its last value (lists use
 * `list`). Errors name the path of the attribute, e.g. "wgdevice.peers.3.allowedIps.0.cidr".
 */
export function decodeAttributes<S extends Schema>(
  table: S,
  data: Buffer,
  where = 'attributes',
): Attributes<S> {
  return decodeAttributesIn(table, data, 0, data.length, where);
}

/** decodeAttributes over buffer[from..to), the hot path of nested attributes. */
function decodeAttributesIn<S extends Schema>(
  table: S,
  buffer: Buffer,
  from: number,
  to: number,
  where: string,
): Attributes<S> {
  const index = indexByType(table);
  const result: Record<string, unknown> = {};
  const cursor = new AttributeCursor(buffer, from, to);
  try {
    while (cursor.next()) {
      const entry = index.get(cursor.type);
      if (entry) result[entry[0]] = cursor.value(entry[1].codec, entry[0]);
    }
  } catch (error) {
    throw located(error, where);
  }
  return result as Attributes<S>;
}

/** A nested attribute holding another table. */
export function nested<S extends Schema>(table: S): Codec<Attributes<S>> {
  return {
    nested: true,
    write(writer, value) {
      writeAttributes(writer, table, value);
    },
    decode(data, where) {
      return decodeAttributes(table, data, where);
    },
    decodeRange(buffer, start, end, where) {
      return decodeAttributesIn(table, buffer, start, end, where);
    },
  };
}

/**
 * A nested attribute holding an array, one nested entry per element. The kernel ignores entry
 * types in most lists (WireGuard's peers use 0), but some number them: nf_tables uses
 * NFTA_LIST_ELEM (1) throughout and tc actions use their 1-based priority.
 */
export function list<T>(
  element: Codec<T>,
  entryType: number | ((index: number) => number) = 0,
): Codec<T[]> {
  const typeOf = typeof entryType === 'number' ? () => entryType : entryType;
  return {
    nested: true,
    write(writer, values) {
      const flags = element.nested ? NLA_F_NESTED : 0;
      for (let index = 0; index < values.length; index++) {
        const start = writer.begin(typeOf(index), flags);
        element.write(writer, values[index]!);
        writer.end(start);
      }
    },
    decode(data, where) {
      return this.decodeRange?.(data, 0, data.length, where) ?? [];
    },
    decodeRange(buffer, from, to, where) {
      const values: T[] = [];
      const cursor = new AttributeCursor(buffer, from, to);
      try {
        while (cursor.next()) values.push(cursor.value(element, String(values.length)));
      } catch (error) {
        throw located(error, where);
      }
      return values;
    },
  };
}
