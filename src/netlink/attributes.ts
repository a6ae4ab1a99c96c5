/**
 * Netlink attributes (struct nlattr, linux/netlink.h): {nla_len u16, nla_type u16} then the
 * payload, padded to 4 bytes; nla_len counts header and payload but not the padding.
 *
 * Two levels:
 * - AttributeWriter / iterateAttributes: raw TLVs, for the few places that need them.
 * - Codecs and schemas: a family describes its attributes as a table
 *   `{ name: { type: WGDEVICE_A_IFNAME, codec: string } }`; encodeAttributes/decodeAttributes turn
 *   typed objects into bytes and back. Nested codecs set NLA_F_NESTED, which strict kernel
 *   parsers (nla_parse_nested, used by WireGuard) require.
 */
import { NLA_F_NESTED, NLA_F_NET_BYTEORDER, NLA_HDRLEN, NLA_TYPE_MASK, align } from './constants';
import { NetlinkProtocolError } from './errors';

const PADDING = Buffer.alloc(NLA_HDRLEN);

export interface RawAttribute {
  /** nla_type without the NLA_F_NESTED / NLA_F_NET_BYTEORDER bits. */
  type: number;
  nested: boolean;
  data: Buffer;
}

/**
 * Walks the attributes in `data`. Throws NetlinkProtocolError on a header that is shorter than
 * 4 bytes or claims more bytes than remain, so malformed input never loops or reads past the end.
 */
export function* iterateAttributes(data: Buffer): Generator<RawAttribute> {
  let offset = 0;
  while (offset < data.length) {
    const remaining = data.length - offset;
    if (remaining < NLA_HDRLEN) {
      // The kernel tolerates (and warns about) trailing bytes shorter than a header.
      if (data.subarray(offset).every((byte) => byte === 0)) return;
      throw new NetlinkProtocolError(`${remaining} stray bytes after the last attribute`);
    }
    const length = data.readUInt16LE(offset);
    const rawType = data.readUInt16LE(offset + 2);
    if (length < NLA_HDRLEN || length > remaining) {
      throw new NetlinkProtocolError(
        `attribute at offset ${offset} has length ${length}, ${remaining} bytes remain`,
      );
    }
    yield {
      type: rawType & NLA_TYPE_MASK,
      nested: (rawType & NLA_F_NESTED) !== 0,
      data: data.subarray(offset + NLA_HDRLEN, offset + length),
    };
    offset += align(length);
  }
}

/** Accumulates attributes; `toBuffer()` concatenates them once. */
export class AttributeWriter {
  private readonly chunks: Buffer[] = [];
  private size = 0;

  get length(): number {
    return this.size;
  }

  /** Appends one attribute. `flags` may hold NLA_F_NESTED / NLA_F_NET_BYTEORDER. */
  put(type: number, data: Buffer, flags = 0): this {
    const length = NLA_HDRLEN + data.length;
    if (length > 0xffff) {
      throw new NetlinkProtocolError(
        `attribute ${type} is ${length} bytes; nla_len is 16 bits (split the request)`,
      );
    }
    const header = Buffer.allocUnsafe(NLA_HDRLEN);
    header.writeUInt16LE(length, 0);
    header.writeUInt16LE((type & NLA_TYPE_MASK) | flags, 2);
    this.chunks.push(header, data);
    const padding = align(length) - length;
    if (padding > 0) this.chunks.push(PADDING.subarray(0, padding));
    this.size += align(length);
    return this;
  }

  /** Appends a nested attribute (with NLA_F_NESTED) whose content `build` writes. */
  nested(type: number, build: (writer: AttributeWriter) => void): this {
    const inner = new AttributeWriter();
    build(inner);
    return this.put(type, inner.toBuffer(), NLA_F_NESTED);
  }

  toBuffer(): Buffer {
    return this.chunks.length === 1 ? this.chunks[0] : Buffer.concat(this.chunks, this.size);
  }
}

/** Turns one attribute payload into a value and back. */
export interface Codec<T> {
  /** Whether attributes of this codec carry NLA_F_NESTED. */
  readonly nested: boolean;
  /** Whether attributes of this codec carry NLA_F_NET_BYTEORDER (never required by our kernels). */
  readonly netByteOrder?: boolean;
  encode(value: T): Buffer;
  /** `where` names the attribute for error messages. */
  decode(data: Buffer, where: string): T;
}

export type ValueOf<C> = C extends Codec<infer T> ? T : never;

function exactLength(data: Buffer, size: number, where: string): void {
  if (data.length !== size) {
    throw new NetlinkProtocolError(`${where}: expected ${size} bytes, got ${data.length}`);
  }
}

function scalar(
  size: number,
  write: (buffer: Buffer, value: number) => void,
  read: (buffer: Buffer) => number,
): Codec<number> {
  return {
    nested: false,
    encode(value) {
      const buffer = Buffer.allocUnsafe(size);
      write(buffer, value);
      return buffer;
    },
    decode(data, where) {
      exactLength(data, size, where);
      return read(data);
    },
  };
}

function bigScalar(
  write: (buffer: Buffer, value: bigint) => void,
  read: (buffer: Buffer) => bigint,
): Codec<bigint> {
  return {
    nested: false,
    encode(value) {
      const buffer = Buffer.allocUnsafe(8);
      write(buffer, value);
      return buffer;
    },
    decode(data, where) {
      exactLength(data, 8, where);
      return read(data);
    },
  };
}

// Host byte order is little-endian on every platform this daemon targets (x86-64, arm64).
export const u8 = scalar(
  1,
  (b, v) => b.writeUInt8(v),
  (b) => b.readUInt8(0),
);
export const u16 = scalar(
  2,
  (b, v) => b.writeUInt16LE(v),
  (b) => b.readUInt16LE(0),
);
export const u32 = scalar(
  4,
  (b, v) => b.writeUInt32LE(v >>> 0),
  (b) => b.readUInt32LE(0),
);
export const s32 = scalar(
  4,
  (b, v) => b.writeInt32LE(v),
  (b) => b.readInt32LE(0),
);
export const u64 = bigScalar(
  (b, v) => b.writeBigUInt64LE(v),
  (b) => b.readBigUInt64LE(0),
);
// Network byte order, as nf_tables and a few tc fields use.
export const be16 = scalar(
  2,
  (b, v) => b.writeUInt16BE(v),
  (b) => b.readUInt16BE(0),
);
export const be32 = scalar(
  4,
  (b, v) => b.writeUInt32BE(v >>> 0),
  (b) => b.readUInt32BE(0),
);
export const be64 = bigScalar(
  (b, v) => b.writeBigUInt64BE(v),
  (b) => b.readBigUInt64BE(0),
);

/** NUL-terminated string (NLA_NUL_STRING / NLA_STRING); decoding stops at the first NUL. */
export const string: Codec<string> = {
  nested: false,
  encode(value) {
    return Buffer.from(`${value}\0`, 'utf8');
  },
  decode(data) {
    const end = data.indexOf(0);
    return data.toString('utf8', 0, end === -1 ? data.length : end);
  },
};

/** Opaque bytes (NLA_BINARY). Decoded buffers are copies, not views into the datagram. */
export const bytes: Codec<Buffer> = {
  nested: false,
  encode(value) {
    return value;
  },
  decode(data) {
    return Buffer.from(data);
  },
};

/** Exactly `size` opaque bytes, such as a WireGuard key. */
export function fixedBytes(size: number): Codec<Buffer> {
  return {
    nested: false,
    encode(value) {
      if (value.length !== size) {
        throw new NetlinkProtocolError(`expected ${size} bytes to encode, got ${value.length}`);
      }
      return value;
    },
    decode(data, where) {
      exactLength(data, size, where);
      return Buffer.from(data);
    },
  };
}

/** A zero-length attribute whose presence is the value (NLA_FLAG). */
export const flag: Codec<true> = {
  nested: false,
  encode() {
    return Buffer.alloc(0);
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

/** Writes the defined properties of `values`, in the table's order. */
export function writeAttributes<S extends Schema>(
  writer: AttributeWriter,
  table: S,
  values: Attributes<S>,
): AttributeWriter {
  for (const name of Object.keys(table)) {
    const value = values[name];
    if (value === undefined) continue;
    const spec = table[name];
    const flags =
      (spec.codec.nested ? NLA_F_NESTED : 0) | (spec.codec.netByteOrder ? NLA_F_NET_BYTEORDER : 0);
    writer.put(spec.type, spec.codec.encode(value), flags);
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

/**
 * Decodes every attribute the table knows; unknown types are skipped, so newer kernels that add
 * attributes do not break us. A repeated attribute keeps its last value (lists use `list`).
 */
export function decodeAttributes<S extends Schema>(
  table: S,
  data: Buffer,
  where = 'attributes',
): Attributes<S> {
  const index = indexByType(table);
  const result: Record<string, unknown> = {};
  for (const attribute of iterateAttributes(data)) {
    const entry = index.get(attribute.type);
    if (!entry) continue;
    const [name, spec] = entry;
    result[name] = spec.codec.decode(attribute.data, `${where}.${name}`);
  }
  return result as Attributes<S>;
}

/** A nested attribute holding another table. */
export function nested<S extends Schema>(table: S): Codec<Attributes<S>> {
  return {
    nested: true,
    encode(value) {
      return encodeAttributes(table, value);
    },
    decode(data, where) {
      return decodeAttributes(table, data, where);
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
    encode(values) {
      const writer = new AttributeWriter();
      values.forEach((value, index) =>
        writer.put(typeOf(index), element.encode(value), element.nested ? NLA_F_NESTED : 0),
      );
      return writer.toBuffer();
    },
    decode(data, where) {
      const values: T[] = [];
      for (const attribute of iterateAttributes(data)) {
        values.push(element.decode(attribute.data, `${where}[${values.length}]`));
      }
      return values;
    },
  };
}
