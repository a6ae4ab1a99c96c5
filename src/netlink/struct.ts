/**
 * Fixed-layout C structs (nlmsghdr, ifinfomsg, tcmsg, tc_htb_opt, ...) described as tables of
 * fields in declaration order, so a layout reads like its header and no offset is written by hand.
 * Padding is declared as fields too (`pad: 'u8'`), which keeps every byte accounted for.
 */
import type { Codec } from './attributes';
import { AttributeWriter } from './writer';
import { NetlinkProtocolError } from './errors';

type NumberKind = 'u8' | 's8' | 'u16' | 's16' | 'u32' | 's32' | 'be16' | 'be32';
type BigKind = 'u64' | 's64' | 'be64';
export type FieldKind = NumberKind | BigKind | { bytes: number } | StructCodec<StructLayout>;
export type StructLayout = Record<string, FieldKind>;

export type FieldValue<K> = K extends BigKind
  ? bigint
  : K extends { bytes: number }
    ? Buffer
    : K extends StructCodec<infer L>
      ? StructValue<L>
      : number;

export type StructValue<L extends StructLayout> = { [K in keyof L]: FieldValue<L[K]> };

interface Field {
  name: string;
  offset: number;
  size: number;
  write(buffer: Buffer, offset: number, value: unknown): void;
  read(buffer: Buffer, offset: number): unknown;
  zero: unknown;
}

const NUMBER_FIELDS: Record<NumberKind | BigKind, Omit<Field, 'name' | 'offset'>> = {
  u8: {
    size: 1,
    zero: 0,
    write: (b, o, v) => b.writeUInt8(v as number, o),
    read: (b, o) => b.readUInt8(o),
  },
  s8: {
    size: 1,
    zero: 0,
    write: (b, o, v) => b.writeInt8(v as number, o),
    read: (b, o) => b.readInt8(o),
  },
  u16: {
    size: 2,
    zero: 0,
    write: (b, o, v) => b.writeUInt16LE(v as number, o),
    read: (b, o) => b.readUInt16LE(o),
  },
  s16: {
    size: 2,
    zero: 0,
    write: (b, o, v) => b.writeInt16LE(v as number, o),
    read: (b, o) => b.readInt16LE(o),
  },
  u32: {
    size: 4,
    zero: 0,
    write: (b, o, v) => b.writeUInt32LE((v as number) >>> 0, o),
    read: (b, o) => b.readUInt32LE(o),
  },
  s32: {
    size: 4,
    zero: 0,
    write: (b, o, v) => b.writeInt32LE(v as number, o),
    read: (b, o) => b.readInt32LE(o),
  },
  be16: {
    size: 2,
    zero: 0,
    write: (b, o, v) => b.writeUInt16BE(v as number, o),
    read: (b, o) => b.readUInt16BE(o),
  },
  be32: {
    size: 4,
    zero: 0,
    write: (b, o, v) => b.writeUInt32BE((v as number) >>> 0, o),
    read: (b, o) => b.readUInt32BE(o),
  },
  u64: {
    size: 8,
    zero: 0n,
    write: (b, o, v) => b.writeBigUInt64LE(v as bigint, o),
    read: (b, o) => b.readBigUInt64LE(o),
  },
  s64: {
    size: 8,
    zero: 0n,
    write: (b, o, v) => b.writeBigInt64LE(v as bigint, o),
    read: (b, o) => b.readBigInt64LE(o),
  },
  be64: {
    size: 8,
    zero: 0n,
    write: (b, o, v) => b.writeBigUInt64BE(v as bigint, o),
    read: (b, o) => b.readBigUInt64BE(o),
  },
};

function makeField(name: string, offset: number, kind: FieldKind): Field {
  if (typeof kind === 'string') return { name, offset, ...NUMBER_FIELDS[kind] };
  if (kind instanceof StructCodec) {
    return {
      name,
      offset,
      size: kind.size,
      zero: undefined,
      write: (b, o, v) => kind.writeInto(b, o, (v ?? {}) as Partial<StructValue<StructLayout>>),
      read: (b, o) => kind.readFrom(b, o),
    };
  }
  const size = kind.bytes;
  return {
    name,
    offset,
    size,
    zero: undefined,
    write: (b, o, v) => {
      if (v === undefined) return;
      const data = v as Buffer;
      if (data.length > size)
        throw new NetlinkProtocolError(`${name}: ${data.length} > ${size} bytes`);
      data.copy(b, o);
    },
    read: (b, o) => Buffer.from(b.subarray(o, o + size)),
  };
}

export class StructCodec<L extends StructLayout> implements Codec<Partial<StructValue<L>>> {
  readonly nested = false;
  readonly size: number;
  private readonly fields: Field[];

  constructor(
    readonly name: string,
    layout: L,
  ) {
    let offset = 0;
    this.fields = Object.entries(layout).map(([fieldName, kind]) => {
      const field = makeField(fieldName, offset, kind);
      offset += field.size;
      return field;
    });
    this.size = offset;
  }

  /**
   * Encodes; fields left out are zero, as a memset C struct would be. Through the writer, whose
   * small buffers come from Node's pool (Buffer.alloc would make an ArrayBuffer per header).
   */
  encode(value: Partial<StructValue<L>>): Buffer {
    const writer = new AttributeWriter(this.size);
    this.write(writer, value);
    return writer.toBuffer();
  }

  /** Writes the struct in place at the writer's end (an attribute's payload, a family header). */
  write(writer: AttributeWriter, value: Partial<StructValue<L>>): void {
    const at = writer.reserve(this.size);
    this.writeInto(writer.buffer, at, value);
  }

  writeInto(buffer: Buffer, offset: number, value: Partial<StructValue<L>>): void {
    const record = value as Record<string, unknown>;
    for (const field of this.fields) {
      const fieldValue = record[field.name] ?? field.zero;
      if (fieldValue !== undefined) field.write(buffer, offset + field.offset, fieldValue);
    }
  }

  /**
   * Decodes the first `size` bytes; longer input is accepted because the kernel may append
   * fields in newer versions, shorter input is an error.
   */
  decode(data: Buffer, where = this.name): StructValue<L> {
    if (data.length < this.size) {
      throw new NetlinkProtocolError(
        `${where}: ${this.name} needs ${this.size} bytes, got ${data.length}`,
      );
    }
    return this.readFrom(data, 0);
  }

  readFrom(buffer: Buffer, offset: number): StructValue<L> {
    const result: Record<string, unknown> = {};
    for (const field of this.fields) result[field.name] = field.read(buffer, offset + field.offset);
    return result as StructValue<L>;
  }
}

export function struct<L extends StructLayout>(name: string, layout: L): StructCodec<L> {
  return new StructCodec(name, layout);
}
