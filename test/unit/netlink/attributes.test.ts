import { expect } from 'chai';
import {
  AttributeCursor,
  AttributeWriter,
  NLA_F_NESTED,
  NetlinkProtocolError,
  be32,
  bytes,
  decodeAttributes,
  encodeAttributes,
  encodeValue,
  fixedBytes,
  flag,
  iterateAttributes,
  list,
  nested,
  schema,
  string,
  u16,
  u32,
  u64,
  u8,
} from '../../../src/netlink';

// Byte layouts below are written out from struct nlattr in linux/netlink.h: nla_len (u16, host
// order, header + payload, no padding), nla_type (u16), payload, zero padding to 4 bytes.
describe('netlink attributes', () => {
  const table = schema({
    id: { type: 1, codec: u32 },
    name: { type: 2, codec: string },
    port: { type: 3, codec: u16 },
    mask: { type: 4, codec: u8 },
    bytes: { type: 5, codec: u64 },
    key: { type: 6, codec: fixedBytes(4) },
    present: { type: 7, codec: flag },
    quota: { type: 8, codec: be32 },
  });

  it('encodes scalars with lengths that exclude padding and pads to 4 bytes', () => {
    const encoded = encodeAttributes(table, { mask: 24, name: 'wg0' });
    // Written in table order: name (type 2) before mask (type 4).
    expect(encoded.toString('hex')).to.equal(
      // len 8, type 2, "wg0\0"            len 5, type 4, 0x18, 3 bytes pad
      '0800020077673000' + '0500040018000000',
    );
  });

  it('round-trips every scalar codec', () => {
    const values = {
      id: 0xfffffffe,
      name: 'wireguard',
      port: 51820,
      mask: 32,
      bytes: 2n ** 63n + 5n,
      key: Buffer.from([1, 2, 3, 4]),
      present: true as const,
      quota: 0x01020304,
    };
    expect(decodeAttributes(table, encodeAttributes(table, values))).to.deep.equal(values);
  });

  it('writes be32 in network byte order and u32 in host (little-endian) order', () => {
    const encoded = encodeAttributes(table, { id: 0x01020304, quota: 0x01020304 });
    expect(encoded.subarray(4, 8).toString('hex')).to.equal('04030201');
    expect(encoded.subarray(12, 16).toString('hex')).to.equal('01020304');
  });

  it('sets NLA_F_NESTED on nested attributes and on every list entry', () => {
    const inner = schema({ family: { type: 1, codec: u16 } });
    const outer = schema({ entries: { type: 9, codec: list(nested(inner)) } });
    const encoded = encodeAttributes(outer, { entries: [{ family: 2 }, { family: 10 }] });
    const [entries] = [...iterateAttributes(encoded)];
    expect(encoded.readUInt16LE(2)).to.equal(9 | NLA_F_NESTED);
    expect(entries.nested).to.equal(true);
    const items = [...iterateAttributes(entries.data)];
    expect(items).to.have.length(2);
    for (const item of items) {
      expect(item.type).to.equal(0);
      expect(item.nested).to.equal(true);
    }
    expect(entries.data.readUInt16LE(2)).to.equal(NLA_F_NESTED);
    expect(decodeAttributes(outer, encoded)).to.deep.equal({
      entries: [{ family: 2 }, { family: 10 }],
    });
  });

  it('numbers list entries when asked (nf_tables NFTA_LIST_ELEM, tc action priorities)', () => {
    const entries = encodeValue(
      list(u32, (index) => index + 1),
      [7, 8, 9],
    );
    expect([...iterateAttributes(entries)].map((a) => a.type)).to.deep.equal([1, 2, 3]);
  });

  it('strips NLA_F_NESTED and NLA_F_NET_BYTEORDER from the type when decoding', () => {
    const raw = new AttributeWriter().put(1, Buffer.from([5, 0, 0, 0]), 0x4000 | 0x8000).toBuffer();
    const [attribute] = [...iterateAttributes(raw)];
    expect(attribute.type).to.equal(1);
  });

  it('skips attributes it does not know (newer kernels add some)', () => {
    const raw = new AttributeWriter()
      .put(99, Buffer.from('ignored'))
      .put(1, encodeValue(u32, 7))
      .toBuffer();
    expect(decodeAttributes(table, raw)).to.deep.equal({ id: 7 });
  });

  it('keeps decoded binary values independent of the datagram they came from', () => {
    const raw = encodeAttributes(schema({ blob: { type: 1, codec: bytes } }), {
      blob: Buffer.from([1, 2]),
    });
    const decoded = decodeAttributes(schema({ blob: { type: 1, codec: bytes } }), raw);
    raw.fill(0);
    expect(decoded.blob).to.deep.equal(Buffer.from([1, 2]));
  });

  describe('malformed input', () => {
    it('rejects an attribute whose length runs past the end', () => {
      const raw = Buffer.from('0c000100aabbccdd', 'hex'); // claims 12 bytes, has 8
      expect(() => decodeAttributes(table, raw)).to.throw(NetlinkProtocolError, /length 12/);
    });

    it('rejects an attribute length shorter than its header (would loop forever)', () => {
      const raw = Buffer.from('00000100', 'hex');
      expect(() => [...iterateAttributes(raw)]).to.throw(NetlinkProtocolError);
    });

    it('rejects a scalar of the wrong size', () => {
      const raw = new AttributeWriter().put(1, Buffer.from([1, 2])).toBuffer(); // u32 with 2 bytes
      expect(() => decodeAttributes(table, raw)).to.throw(NetlinkProtocolError, /expected 4 bytes/);
    });

    it('rejects non-zero stray bytes after the last attribute', () => {
      const raw = Buffer.concat([encodeAttributes(table, { id: 1 }), Buffer.from([1, 2])]);
      expect(() => decodeAttributes(table, raw)).to.throw(NetlinkProtocolError, /stray/);
    });

    it('survives every truncation of a valid nested message with an error or a value, never a hang', () => {
      const inner = schema({ family: { type: 1, codec: u16 }, name: { type: 2, codec: string } });
      const outer = schema({
        entries: { type: 9, codec: list(nested(inner)) },
        id: { type: 1, codec: u32 },
      });
      const valid = encodeAttributes(outer, {
        id: 3,
        entries: [
          { family: 2, name: 'a' },
          { family: 10, name: 'bcd' },
        ],
      });
      for (let cut = 0; cut < valid.length; cut++) {
        try {
          decodeAttributes(outer, valid.subarray(0, cut));
        } catch (error) {
          expect(error).to.be.instanceOf(NetlinkProtocolError);
        }
      }
    });

    it('survives random garbage with NetlinkProtocolError only', () => {
      const inner = schema({ family: { type: 1, codec: u16 } });
      const outer = schema({
        entries: { type: 9, codec: list(nested(inner)) },
        id: { type: 1, codec: u32 },
      });
      let seed = 12345;
      const random = () => (seed = (seed * 1103515245 + 12345) & 0x7fffffff) & 0xff;
      for (let round = 0; round < 2000; round++) {
        const garbage = Buffer.from(Array.from({ length: 1 + (round % 64) }, random));
        try {
          decodeAttributes(outer, garbage);
        } catch (error) {
          expect(error).to.be.instanceOf(NetlinkProtocolError);
        }
      }
    });
  });

  it('refuses to encode an attribute longer than nla_len can express', () => {
    expect(() => new AttributeWriter().put(1, Buffer.alloc(70000))).to.throw(
      NetlinkProtocolError,
      /16 bits/,
    );
  });

  it('walks attributes with a cursor: type without flags, payload range, nested members, widths', () => {
    // {len 8, type 1: u32 7}, {len 20, type 2|NLA_F_NESTED: {len 6, type 5: u16 0x0102, pad 2},
    // {len 5, type 6: u8 9, pad 3}}.
    const data = Buffer.from([
      8, 0, 1, 0, 7, 0, 0, 0, 20, 0, 2, 0x80, 6, 0, 5, 0, 2, 1, 0, 0, 5, 0, 6, 0, 9, 0, 0, 0,
    ]);
    const outer = new AttributeCursor(data);
    expect(outer.next()).to.equal(true);
    expect(outer).to.include({ type: 1, nested: false, start: 4, end: 8 });
    expect(u32.read(outer.buffer, outer.at(u32.size, 'id'))).to.equal(7);
    expect(() => outer.at(2, 'id')).to.throw(NetlinkProtocolError, 'id: expected 2 bytes, got 4');
    expect(outer.next()).to.equal(true);
    expect(outer).to.include({ type: 2, nested: true });
    const inner = outer.enter(new AttributeCursor());
    expect(inner.next() && inner.value(u16, 'a')).to.equal(0x0102);
    expect(inner.next() && inner.value(u8, 'b')).to.equal(9);
    expect(inner.next()).to.equal(false);
    expect(outer.next()).to.equal(false);
  });
});
