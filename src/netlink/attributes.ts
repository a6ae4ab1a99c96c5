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
 * Calls `visit(type, nested, start, end)` for each attribute in `data`, where data[start..end)
 * is the payload. Throws NetlinkProtocolError on a header shorter than 4 bytes or claiming more
 * bytes than remain, so malformed input never loops or reads past the end. This is the hot loop
 * of every dump (a 10,000-peer WireGuard device is ~100,000 attributes): it allocates nothing.
 * `from`/`to` walk a range of `data`, so nested attributes need no Buffer view of their own.
 */
export function forEachAttribute(
  data: Buffer,
  visit: (type: number, nested: boolean, start: number, end: number) => void,
  from = 0,
  to = data.length,
): void {
  let offset = from;
  const length = to;
  while (offset < length) {
    const remaining = length - offset;
    if (remaining < NLA_HDRLEN) {
      // The kernel tolerates (and warns about) trailing bytes shorter than a header.
      for (let i = offset; i < length; i++) {
        if (data[i] !== 0) {
          throw new NetlinkProtocolError(`${remaining} stray bytes after the last attribute`);
        }
      }
      return;
    }
    const attributeLength = data.readUInt16LE(offset);
    const rawType = data.readUInt16LE(offset + 2);
    if (attributeLength < NLA_HDRLEN || attributeLength > remaining) {
      throw new NetlinkProtocolError(
        `attribute at offset ${offset} has length ${attributeLength}, ${remaining} bytes remain`,
      );
    }
    visit(
      rawType & NLA_TYPE_MASK,
      (rawType & NLA_F_NESTED) !== 0,
      offset + NLA_HDRLEN,
      offset + attributeLength,
    );
    offset += align(attributeLength);
  }
}

/** The attributes in `data` as a list (for tests and the few places that need raw TLVs). */
export function iterateAttributes(data: Buffer): RawAttribute[] {
  const attributes: RawAttribute[] = [];
  forEachAttribute(data, (type, isNested, start, end) =>
    attributes.push({ type, nested: isNested, data: data.subarray(start, end) }),
  );
  return attributes;
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
  /**
   * Decodes buffer[start..end) in place. Scalars implement it so the hot decoding loop does not
   * allocate a Buffer view per attribute; codecs without it get a subarray.
   */
  decodeRange?(buffer: Buffer, start: number, end: number, where: string): T;
}

export type ValueOf<C> = C extends Codec<infer T> ? T : never;

function exactLength(length: number, size: number, where: string): void {
  if (length !== size) {
    throw new NetlinkProtocolError(`${where}: expected ${size} bytes, got ${length}`);
  }
}

/**
 * A value of fixed width (scalars, keys, small structs read field by field): encoded into a
 * buffer of `size` bytes, decoded in place from any range of exactly that length.
 */
export function fixedWidth<T>(
  size: number,
  write: (buffer: Buffer, value: T) => void,
  read: (buffer: Buffer, offset: number) => T,
): Codec<T> {
  return {
    nested: false,
    encode(value) {
      const buffer = Buffer.alloc(size);
      write(buffer, value);
      return buffer;
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
  (b, v) => b.writeUInt8(v),
  (b, o) => b.readUInt8(o),
);
export const u16 = fixedWidth<number>(
  2,
  (b, v) => b.writeUInt16LE(v),
  (b, o) => b.readUInt16LE(o),
);
export const u32 = fixedWidth<number>(
  4,
  (b, v) => b.writeUInt32LE(v >>> 0),
  (b, o) => b.readUInt32LE(o),
);
export const s32 = fixedWidth<number>(
  4,
  (b, v) => b.writeInt32LE(v),
  (b, o) => b.readInt32LE(o),
);
export const u64 = fixedWidth<bigint>(
  8,
  (b, v) => b.writeBigUInt64LE(v),
  (b, o) => b.readBigUInt64LE(o),
);
// Network byte order, as nf_tables and a few tc fields use.
export const be16 = fixedWidth<number>(
  2,
  (b, v) => b.writeUInt16BE(v),
  (b, o) => b.readUInt16BE(o),
);
export const be32 = fixedWidth<number>(
  4,
  (b, v) => b.writeUInt32BE(v >>> 0),
  (b, o) => b.readUInt32BE(o),
);
export const be64 = fixedWidth<bigint>(
  8,
  (b, v) => b.writeBigUInt64BE(v),
  (b, o) => b.readBigUInt64BE(o),
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
  decodeRange(buffer, start, end) {
    const nul = buffer.indexOf(0, start);
    return buffer.toString('utf8', start, nul === -1 || nul > end ? end : nul);
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
      exactLength(data.length, size, where);
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

/** Prefixes a decoding error with where it happened, on the error path only. */
function located(error: unknown, where: string): unknown {
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
  try {
    forEachAttribute(
      buffer,
      (type, _nested, start, end) => {
        const entry = index.get(type);
        if (!entry) return;
        const codec = entry[1].codec;
        result[entry[0]] = codec.decodeRange
          ? codec.decodeRange(buffer, start, end, entry[0])
          : codec.decode(buffer.subarray(start, end), entry[0]);
      },
      from,
      to,
    );
  } catch (error) {
    throw located(error, where);
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
    encode(values) {
      const writer = new AttributeWriter();
      values.forEach((value, index) =>
        writer.put(typeOf(index), element.encode(value), element.nested ? NLA_F_NESTED : 0),
      );
      return writer.toBuffer();
    },
    decode(data, where) {
      return this.decodeRange?.(data, 0, data.length, where) ?? [];
    },
    decodeRange(buffer, from, to, where) {
      const values: T[] = [];
      try {
        forEachAttribute(
          buffer,
          (_type, _nested, start, end) => {
            const name = String(values.length);
            values.push(
              element.decodeRange
                ? element.decodeRange(buffer, start, end, name)
                : element.decode(buffer.subarray(start, end), name),
            );
          },
          from,
          to,
        );
      } catch (error) {
        throw located(error, where);
      }
      return values;
    },
  };
}
