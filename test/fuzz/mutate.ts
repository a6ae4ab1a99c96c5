/**
 * Mutations of real netlink messages, as fast-check arbitraries. A case is a seed (a recorded
 * message) and a few mutations, or purely random bytes. Mutations are generated as plain data
 * (positions as large integers taken modulo the input's length when applied) so fast-check can
 * shrink and print them, and applied deterministically.
 *
 * Structure-aware mutations find the nlmsghdr and nlattr headers of the input first (`locate`):
 * wrong lengths (too small, too big, odd), duplicated attributes, huge counts of one attribute,
 * and deep nesting, with the enclosing lengths fixed up so the mutation reaches the inner parser
 * instead of failing at the outermost length check.
 */
import fc from 'fast-check';
import { NLA_F_NESTED, NLMSG_ERROR, NLMSG_HDRLEN, align } from '../../src/netlink';

/** How to find headers in an input: a datagram of messages, an attribute stream, or opaque. */
export type Layout = 'messages' | 'attributes' | 'bytes';

interface LengthField {
  at: number;
  /** 2 for nla_len, 4 for nlmsg_len. */
  width: 2 | 4;
}

interface Located {
  /** Offset of the header. */
  at: number;
  /** The lengths that contain it (outermost first). */
  ancestors: LengthField[];
}

interface Structure {
  messages: Located[];
  attributes: Located[];
}

const MAX_DEPTH = 8;
/** Family headers tried after nlmsghdr: genl and nfgenmsg 4, ifaddrmsg 8, rtmsg 12, ifinfomsg 16, tcmsg 20. */
const FAMILY_HEADERS = [4, 8, 12, 16, 20, 0];
const MAX_INPUT = 256 * 1024;

/** Whether data[from..to) is a chain of well-formed attributes (the trailing padding allowed). */
function attributeChain(data: Buffer, from: number, to: number): number[] | null {
  const offsets: number[] = [];
  let offset = from;
  while (offset + 4 <= to) {
    const length = data.readUInt16LE(offset);
    if (length < 4 || offset + length > to) return null;
    offsets.push(offset);
    offset += align(length);
  }
  return offsets.length > 0 && offset >= to ? offsets : null;
}

function walkAttributes(
  data: Buffer,
  from: number,
  to: number,
  ancestors: LengthField[],
  found: Located[],
  depth: number,
): boolean {
  const chain = attributeChain(data, from, to);
  if (!chain) return false;
  for (const at of chain) {
    found.push({ at, ancestors });
    const length = data.readUInt16LE(at);
    if (depth < MAX_DEPTH && length >= 8) {
      walkAttributes(data, at + 4, at + length, [...ancestors, { at, width: 2 }], found, depth + 1);
    }
  }
  return true;
}

export function locate(data: Buffer, layout: Layout): Structure {
  const structure: Structure = { messages: [], attributes: [] };
  if (layout === 'attributes') {
    walkAttributes(data, 0, data.length, [], structure.attributes, 0);
  } else if (layout === 'messages') {
    let offset = 0;
    while (offset + NLMSG_HDRLEN <= data.length) {
      const length = data.readUInt32LE(offset);
      if (length < NLMSG_HDRLEN || offset + length > data.length) break;
      structure.messages.push({ at: offset, ancestors: [] });
      const self: LengthField = { at: offset, width: 4 };
      if (data.readUInt16LE(offset + 4) === NLMSG_ERROR && length >= 4 + 2 * NLMSG_HDRLEN) {
        // The request echoed in NLMSG_ERROR has a header of its own.
        structure.messages.push({ at: offset + NLMSG_HDRLEN + 4, ancestors: [self] });
      }
      for (const header of FAMILY_HEADERS) {
        const start = offset + NLMSG_HDRLEN + header;
        if (start >= offset + length) continue;
        if (walkAttributes(data, start, offset + length, [self], structure.attributes, 0)) break;
      }
      offset += align(length);
    }
  }
  return structure;
}

export type Mutation =
  | { op: 'flip'; at: number; bit: number }
  | { op: 'set'; at: number; value: number }
  | { op: 'truncate'; at: number }
  | { op: 'messageLength'; which: number; how: LengthChange; delta: number }
  | { op: 'attributeLength'; which: number; how: LengthChange; delta: number }
  | { op: 'attributeType'; which: number; type: number }
  | { op: 'duplicate'; which: number; copies: number }
  | { op: 'nest'; which: number; depth: number };

type LengthChange = 'small' | 'big' | 'odd' | 'max' | 'zero';

export type FuzzCase =
  { kind: 'mutated'; seed: number; mutations: Mutation[] } | { kind: 'random'; bytes: Uint8Array };

const position = fc.nat();
const lengthChange = fc.constantFrom<LengthChange>('small', 'big', 'odd', 'max', 'zero');
const interesting = fc.oneof(
  fc.constantFrom(0x00, 0xff, 0x7f, 0x80, 0x01, 0x04, 0x10),
  fc.integer({ min: 0, max: 255 }),
);

export const mutation: fc.Arbitrary<Mutation> = fc.oneof(
  {
    weight: 4,
    arbitrary: fc.record({
      op: fc.constant('flip' as const),
      at: position,
      bit: fc.integer({ min: 0, max: 7 }),
    }),
  },
  {
    weight: 3,
    arbitrary: fc.record({ op: fc.constant('set' as const), at: position, value: interesting }),
  },
  { weight: 2, arbitrary: fc.record({ op: fc.constant('truncate' as const), at: position }) },
  {
    weight: 2,
    arbitrary: fc.record({
      op: fc.constant('messageLength' as const),
      which: position,
      how: lengthChange,
      delta: fc.integer({ min: 1, max: 64 }),
    }),
  },
  {
    weight: 4,
    arbitrary: fc.record({
      op: fc.constant('attributeLength' as const),
      which: position,
      how: lengthChange,
      delta: fc.integer({ min: 1, max: 64 }),
    }),
  },
  {
    weight: 2,
    arbitrary: fc.record({
      op: fc.constant('attributeType' as const),
      which: position,
      type: fc.oneof(fc.integer({ min: 0, max: 40 }), fc.integer({ min: 0, max: 0xffff })),
    }),
  },
  {
    weight: 2,
    arbitrary: fc.record({
      op: fc.constant('duplicate' as const),
      which: position,
      copies: fc.oneof(
        { weight: 3, arbitrary: fc.integer({ min: 1, max: 3 }) },
        { weight: 1, arbitrary: fc.integer({ min: 100, max: 3000 }) },
      ),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({
      op: fc.constant('nest' as const),
      which: position,
      depth: fc.oneof(fc.integer({ min: 2, max: 16 }), fc.integer({ min: 100, max: 4000 })),
    }),
  },
);

/** A case over `seedCount` seeds: mostly mutated seeds, some purely random bytes. */
export function fuzzCase(seedCount: number): fc.Arbitrary<FuzzCase> {
  const random = fc.record({
    kind: fc.constant('random' as const),
    bytes: fc.uint8Array({ maxLength: 512 }),
  });
  if (seedCount === 0) return random;
  return fc.oneof(
    {
      weight: 9,
      arbitrary: fc.record({
        kind: fc.constant('mutated' as const),
        seed: fc.nat({ max: seedCount - 1 }),
        mutations: fc.array(mutation, { minLength: 1, maxLength: 4 }),
      }),
    },
    { weight: 1, arbitrary: random },
  );
}

/** Adds `delta` to every enclosing length; false (and no change) if a u16 one would overflow. */
function growAncestors(data: Buffer, ancestors: LengthField[], delta: number): boolean {
  for (const field of ancestors) {
    if (field.width === 2 && data.readUInt16LE(field.at) + delta > 0xffff) return false;
  }
  for (const field of ancestors) {
    if (field.width === 2) data.writeUInt16LE(data.readUInt16LE(field.at) + delta, field.at);
    else data.writeUInt32LE((data.readUInt32LE(field.at) + delta) >>> 0, field.at);
  }
  return true;
}

function insert(data: Buffer, at: number, bytes: Buffer): Buffer {
  return Buffer.concat([data.subarray(0, at), bytes, data.subarray(at)]);
}

function changedLength(current: number, how: LengthChange, delta: number, max: number): number {
  switch (how) {
    case 'small':
      return Math.max(0, current - delta);
    case 'big':
      return Math.min(max, current + delta);
    case 'odd':
      return Math.min(max, current + (delta % 3) + 1);
    case 'max':
      return max;
    case 'zero':
      return delta % 4;
  }
}

export function applyMutation(input: Buffer, m: Mutation, layout: Layout): Buffer {
  if (input.length === 0) return input;
  const data = Buffer.from(input);
  switch (m.op) {
    case 'flip':
      data[m.at % data.length] ^= 1 << m.bit;
      return data;
    case 'set':
      data[m.at % data.length] = m.value;
      return data;
    case 'truncate':
      return data.subarray(0, m.at % data.length);
    default:
      break;
  }
  const structure = locate(data, layout);
  if (m.op === 'messageLength') {
    const target = structure.messages[m.which % Math.max(1, structure.messages.length)];
    if (!target) return data;
    const length = data.readUInt32LE(target.at);
    data.writeUInt32LE(changedLength(length, m.how, m.delta, 0xffffffff) >>> 0, target.at);
    return data;
  }
  const target = structure.attributes[m.which % Math.max(1, structure.attributes.length)];
  if (!target) return data;
  const length = data.readUInt16LE(target.at);
  switch (m.op) {
    case 'attributeLength':
      data.writeUInt16LE(changedLength(length, m.how, m.delta, 0xffff), target.at);
      return data;
    case 'attributeType':
      data.writeUInt16LE(m.type, target.at + 2);
      return data;
    case 'duplicate': {
      // Repeated attributes right after the original (a list of thousands, or a scalar twice).
      const one = data.subarray(target.at, target.at + align(length));
      const copies = Math.min(m.copies, Math.floor(MAX_INPUT / Math.max(4, one.length)));
      const added = one.length * copies;
      if (!growAncestors(data, target.ancestors, added)) return data;
      const repeated = Buffer.alloc(added);
      for (let i = 0; i < copies; i++) one.copy(repeated, i * one.length);
      return insert(data, target.at + one.length, repeated);
    }
    case 'nest': {
      // The attribute wrapped in `depth` nests of its own type.
      const depth = Math.min(m.depth, Math.floor((0xffff - length) / 4));
      if (depth <= 0 || !growAncestors(data, target.ancestors, depth * 4)) return data;
      const type = data.readUInt16LE(target.at + 2) | NLA_F_NESTED;
      const headers = Buffer.alloc(depth * 4);
      for (let i = 0; i < depth; i++) {
        headers.writeUInt16LE(length + 4 * (depth - i), i * 4);
        headers.writeUInt16LE(type, i * 4 + 2);
      }
      return insert(data, target.at, headers);
    }
  }
}

/** The bytes of a case: its seed with every mutation applied in order, or its random bytes. */
export function materialize(c: FuzzCase, seeds: Buffer[], layout: Layout): Buffer {
  if (c.kind === 'random') return Buffer.from(c.bytes);
  let data: Buffer = Buffer.from(seeds[c.seed]);
  for (const m of c.mutations) data = applyMutation(data, m, layout);
  return data;
}
