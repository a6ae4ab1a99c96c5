/**
 * The in-place attribute encoder (src/netlink/writer.ts, issue 29) against the encoder it
 * replaced: that one (kept below as the reference, as it was) made a Buffer per attribute and
 * concatenated each nesting level. The bytes must be the same for any attribute tree and any
 * value of every codec: the transcript replay tests hold those bytes to what real kernels took.
 */
import { expect } from 'chai';
import fc from 'fast-check';
import {
  AttributeWriter,
  NLA_F_NESTED,
  NetlinkProtocolError,
  be16,
  be32,
  be64,
  bytes,
  encodeAttributes,
  encodeMessage,
  encodeMessages,
  flag,
  list,
  nested,
  s32,
  schema,
  string,
  u16,
  u32,
  u64,
  u8,
  writeAttributes,
} from '../../../src/netlink';
import { setPeerMessages } from '../../../src/kernel/wireguard';
import {
  NFTA_EXPR_DATA,
  NFTA_EXPR_NAME,
  NFTA_OBJREF_SET_NAME,
  NFTA_OBJREF_SET_SREG,
} from '../../../src/kernel/nftables/constants';
import { expressionCodec } from '../../../src/kernel/nftables/expressions';
import { deviceWriteAttributes } from '../../../src/kernel/wireguard/schema';

// ---- the reference: the encoder before issue 29, as it was (attributes.ts AttributeWriter.put)

function refAttribute(type: number, data: Buffer, flags = 0): Buffer {
  const length = 4 + data.length;
  const header = Buffer.alloc(4);
  header.writeUInt16LE(length, 0);
  header.writeUInt16LE((type & 0x3fff) | flags, 2);
  const padding = ((length + 3) & ~3) - length;
  return Buffer.concat([header, data, Buffer.alloc(padding)]);
}

type Tree =
  | { kind: 'leaf'; type: number; flags: number; data: Uint8Array }
  | { kind: 'nest'; type: number; children: Tree[] };

function refTree(nodes: Tree[]): Buffer {
  return Buffer.concat(
    nodes.map((node) =>
      node.kind === 'leaf'
        ? refAttribute(node.type, Buffer.from(node.data), node.flags)
        : refAttribute(node.type, refTree(node.children), NLA_F_NESTED),
    ),
  );
}

function writeTree(writer: AttributeWriter, nodes: Tree[]): void {
  for (const node of nodes) {
    if (node.kind === 'leaf') writer.put(node.type, Buffer.from(node.data), node.flags);
    else writer.nested(node.type, (inner) => writeTree(inner, node.children));
  }
}

const tree: fc.Arbitrary<Tree[]> = fc.letrec<{ nodes: Tree[]; node: Tree }>((tie) => ({
  node: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    fc.record({
      kind: fc.constant('leaf' as const),
      type: fc.integer({ min: 0, max: 0x3fff }),
      flags: fc.constantFrom(0, 0x4000, 0x8000),
      data: fc.uint8Array({ maxLength: 23 }),
    }),
    fc.record({
      kind: fc.constant('nest' as const),
      type: fc.integer({ min: 0, max: 0x3fff }),
      children: tie('nodes'),
    }),
  ),
  nodes: fc.array(tie('node'), { maxLength: 5 }),
})).nodes;

// Every codec of attributes.ts in one table, with the old encoders' bytes for each.
const inner = schema({ a: { type: 1, codec: u32 }, b: { type: 2, codec: string } });
const table = schema({
  u8: { type: 1, codec: u8 },
  u16: { type: 2, codec: u16 },
  u32: { type: 3, codec: u32 },
  s32: { type: 4, codec: s32 },
  u64: { type: 5, codec: u64 },
  be16: { type: 6, codec: be16 },
  be32: { type: 7, codec: be32 },
  be64: { type: 8, codec: be64 },
  text: { type: 9, codec: string },
  blob: { type: 10, codec: bytes },
  present: { type: 11, codec: flag },
  inner: { type: 12, codec: nested(inner) },
  entries: { type: 13, codec: list(nested(inner)) },
  numbered: { type: 14, codec: list(u32, (index) => index + 1) },
});

function fixed(size: number, write: (buffer: Buffer) => void): Buffer {
  const buffer = Buffer.alloc(size);
  write(buffer);
  return buffer;
}

type Inner = { a?: number; b?: string };
function refInner(value: Inner): Buffer {
  return Buffer.concat([
    ...(value.a === undefined
      ? []
      : [
          refAttribute(
            1,
            fixed(4, (b) => b.writeUInt32LE(value.a!)),
          ),
        ]),
    ...(value.b === undefined ? [] : [refAttribute(2, Buffer.from(`${value.b}\0`, 'utf8'))]),
  ]);
}

const innerValue: fc.Arbitrary<Inner> = fc.record(
  { a: fc.nat({ max: 0xffffffff }), b: fc.string({ maxLength: 9 }) },
  { requiredKeys: [] },
);

const values = fc.record(
  {
    u8: fc.nat({ max: 0xff }),
    u16: fc.nat({ max: 0xffff }),
    u32: fc.nat({ max: 0xffffffff }),
    s32: fc.integer({ min: -0x80000000, max: 0x7fffffff }),
    u64: fc.bigInt({ min: 0n, max: 2n ** 64n - 1n }),
    be16: fc.nat({ max: 0xffff }),
    be32: fc.nat({ max: 0xffffffff }),
    be64: fc.bigInt({ min: 0n, max: 2n ** 64n - 1n }),
    text: fc.string({ maxLength: 12, unit: 'binary' }),
    blob: fc.uint8Array({ maxLength: 13 }).map((data) => Buffer.from(data)),
    present: fc.constant(true as const),
    inner: innerValue,
    entries: fc.array(innerValue, { maxLength: 4 }),
    numbered: fc.array(fc.nat({ max: 0xffffffff }), { maxLength: 4 }),
  },
  { requiredKeys: [] },
);

type Values = Parameters<typeof encodeAttributes<typeof table>>[1];

function refValues(v: Values): Buffer {
  const parts: Buffer[] = [];
  const add = (type: number, data: Buffer, flags = 0) =>
    parts.push(refAttribute(type, data, flags));
  if (v.u8 !== undefined)
    add(
      1,
      fixed(1, (b) => b.writeUInt8(v.u8!)),
    );
  if (v.u16 !== undefined)
    add(
      2,
      fixed(2, (b) => b.writeUInt16LE(v.u16!)),
    );
  if (v.u32 !== undefined)
    add(
      3,
      fixed(4, (b) => b.writeUInt32LE(v.u32! >>> 0)),
    );
  if (v.s32 !== undefined)
    add(
      4,
      fixed(4, (b) => b.writeInt32LE(v.s32!)),
    );
  if (v.u64 !== undefined)
    add(
      5,
      fixed(8, (b) => b.writeBigUInt64LE(v.u64!)),
    );
  if (v.be16 !== undefined)
    add(
      6,
      fixed(2, (b) => b.writeUInt16BE(v.be16!)),
    );
  if (v.be32 !== undefined)
    add(
      7,
      fixed(4, (b) => b.writeUInt32BE(v.be32! >>> 0)),
    );
  if (v.be64 !== undefined)
    add(
      8,
      fixed(8, (b) => b.writeBigUInt64BE(v.be64!)),
    );
  if (v.text !== undefined) add(9, Buffer.from(`${v.text}\0`, 'utf8'));
  if (v.blob !== undefined) add(10, v.blob);
  if (v.present !== undefined) add(11, Buffer.alloc(0));
  if (v.inner !== undefined) add(12, refInner(v.inner), NLA_F_NESTED);
  if (v.entries !== undefined) {
    const entries = v.entries.map((entry) => refAttribute(0, refInner(entry), NLA_F_NESTED));
    add(13, Buffer.concat(entries), NLA_F_NESTED);
  }
  if (v.numbered !== undefined) {
    const entries = v.numbered.map((n, i) =>
      refAttribute(
        i + 1,
        fixed(4, (b) => b.writeUInt32LE(n)),
      ),
    );
    add(14, Buffer.concat(entries), NLA_F_NESTED);
  }
  return Buffer.concat(parts);
}

describe('netlink/writer: attributes written in place, byte for byte as before (issue 29)', () => {
  it('writes any tree of attributes as the per-attribute encoder did: headers, nests, padding', () => {
    fc.assert(
      fc.property(tree, (nodes) => {
        const writer = new AttributeWriter(4); // grows many times
        writeTree(writer, nodes);
        expect(writer.toBuffer().equals(refTree(nodes))).to.equal(true);
      }),
      { numRuns: 500 },
    );
  });

  it('encodes every codec of the attribute tables as before, into a buffer full of stale bytes', () => {
    fc.assert(
      fc.property(
        values,
        fc.uint8Array({ minLength: 1, maxLength: 1 }),
        fc.integer({ min: 4, max: 96 }),
        (v, [stale], capacity) => {
          expect(encodeAttributes(table, v).equals(refValues(v))).to.equal(true);
          // A writer whose pooled bytes are not zero still writes zero padding and zero fields.
          // Small capacities: the values land on either side of the buffer's growths.
          const writer = new AttributeWriter(capacity);
          writer.buffer.fill(stale!);
          const start = writer.begin(99, NLA_F_NESTED);
          writeAttributes(writer, table, v);
          writer.end(start);
          expect(writer.toBuffer().equals(refAttribute(99, refValues(v), NLA_F_NESTED))).to.equal(
            true,
          );
        },
      ),
      { numRuns: 300 },
    );
  });

  it('refuses an attribute longer than nla_len holds, naming its type', () => {
    const writer = new AttributeWriter();
    expect(() =>
      writer.nested(7, (inner) => {
        for (let i = 0; i < 20; i++) inner.put(1, Buffer.alloc(4000));
      }),
    ).to.throw(NetlinkProtocolError, /attribute 7 is 80084 bytes; nla_len is 16 bits/);
  });

  it('puts several messages in one datagram as the one-message encoder does each', () => {
    fc.assert(
      fc.property(
        fc.array(
          fc.record({
            type: fc.nat({ max: 0xffff }),
            flags: fc.nat({ max: 0xffff }),
            seq: fc.nat({ max: 0xffffffff }),
            pid: fc.nat({ max: 0xffffffff }),
            payload: fc.uint8Array({ maxLength: 30 }).map((data) => Buffer.from(data)),
          }),
          { maxLength: 6 },
        ),
        (messages) => {
          const reference = Buffer.concat(
            messages.map((message) => {
              const length = 16 + message.payload.length;
              const buffer = Buffer.alloc((length + 3) & ~3);
              buffer.writeUInt32LE(length, 0);
              buffer.writeUInt16LE(message.type, 4);
              buffer.writeUInt16LE(message.flags, 6);
              buffer.writeUInt32LE(message.seq, 8);
              buffer.writeUInt32LE(message.pid, 12);
              message.payload.copy(buffer, 16);
              return buffer;
            }),
          );
          expect(encodeMessages(messages).equals(reference)).to.equal(true);
          expect(
            Buffer.concat(messages.map((message) => encodeMessage(message))).equals(reference),
          ).to.equal(true);
        },
      ),
      { numRuns: 200 },
    );
  });
});

describe('kernel/nftables: expressions written in place (issue 29)', () => {
  it('writes an objref map lookup as before whichever side of a growth its set name falls (no NUL, as nft)', () => {
    const name = 'wg_peerd_caps_map_of_a_long_interface';
    const reference = Buffer.concat([
      refAttribute(NFTA_EXPR_NAME, Buffer.from('objref\0')),
      refAttribute(
        NFTA_EXPR_DATA,
        Buffer.concat([
          refAttribute(
            NFTA_OBJREF_SET_SREG,
            fixed(4, (b) => b.writeUInt32BE(1)),
          ),
          refAttribute(NFTA_OBJREF_SET_NAME, Buffer.from(name)),
        ]),
        NLA_F_NESTED,
      ),
    ]);
    for (let capacity = 4; capacity <= reference.length; capacity++) {
      const writer = new AttributeWriter(capacity);
      expressionCodec.write(writer, { name: 'objref', setSreg: 1, setName: name });
      expect(writer.toBuffer().toString('hex'), `capacity ${capacity}`).to.equal(
        reference.toString('hex'),
      );
    }
  });
});

// ---- WireGuard's SET_DEVICE messages: each peer entry encoded once, split as before

type Peer = Parameters<typeof setPeerMessages>[1][number];

/** The plan before issue 29: entries sized by encoding each, then each message encoded again. */
function refPeerMessages(name: string, peers: Peer[]): Buffer[] {
  const entries: Peer[] = [];
  for (const peer of peers) {
    const ips = peer.allowedIps ?? [];
    const continuationFlags = (peer.flags ?? 0) & (1 | 4); // WGPEER_F_REMOVE_ME | UPDATE_ONLY
    for (let start = 0; start === 0 || start < ips.length; start += 256) {
      const chunk = ips.length > 0 ? ips.slice(start, start + 256) : undefined;
      entries.push(
        start === 0
          ? { ...peer, allowedIps: chunk }
          : { publicKey: peer.publicKey, flags: continuationFlags, allowedIps: chunk },
      );
    }
  }
  const messages: Peer[][] = [];
  let current: Peer[] = [];
  let size = 0;
  for (const entry of entries) {
    const entrySize = encodeAttributes(deviceWriteAttributes, { peers: [entry] }).length - 4;
    if (current.length > 0 && size + entrySize > 32 * 1024) {
      messages.push(current);
      current = [];
      size = 0;
    }
    current.push(entry);
    size += entrySize;
  }
  if (current.length > 0) messages.push(current);
  return messages.map((batch) =>
    encodeAttributes(deviceWriteAttributes, { ifname: name, peers: batch }),
  );
}

const key = fc
  .uint8Array({ minLength: 32, maxLength: 32 })
  .map((raw) => Buffer.from(raw).toString('base64'));
const peer: fc.Arbitrary<Peer> = fc.record(
  {
    publicKey: key,
    flags: fc.constantFrom(0, 1, 2, 4, 6),
    persistentKeepalive: fc.nat({ max: 0xffff }),
    presharedKey: fc.uint8Array({ minLength: 32, maxLength: 32 }).map((raw) => Buffer.from(raw)),
    allowedIps: fc
      .oneof(
        fc.array(fc.nat({ max: 0xffff }), { maxLength: 3 }),
        fc.array(fc.nat({ max: 0xffff }), { minLength: 250, maxLength: 600 }),
      )
      .map((hosts) =>
        hosts.map((h) => ({ family: 2, address: `10.9.${h >> 8}.${h & 255}`, cidr: 32 })),
      ),
  },
  { requiredKeys: ['publicKey'] },
);

describe('kernel/wireguard: SET_DEVICE messages with each peer encoded once (issue 29)', () => {
  it('gives the messages of the plan that encoded each peer twice: same splits, same bytes', () => {
    fc.assert(
      fc.property(fc.array(peer, { maxLength: 400 }), (peers) => {
        const ours = setPeerMessages('wg0', peers);
        const before = refPeerMessages('wg0', peers);
        expect(ours.length).to.equal(before.length);
        ours.forEach((message, i) => expect(message.equals(before[i]!)).to.equal(true));
      }),
      { numRuns: 60 },
    );
  });
});
