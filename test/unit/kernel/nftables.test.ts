/**
 * The nf_tables messages of the data caps, compared with what nft itself sends.
 *
 * Golden bytes: each constant is the payload (nfgenmsg + attributes) of the one nf_tables message
 * that nftables 1.0.6 (libnftnl) put in its batch for the command above it, captured with
 * `strace -e trace=sendmsg -e write=3 nft ...` in a scratch network namespace. nft is an encoder
 * independent of ours; where our message matches it byte for byte, the kernel reads both the same.
 */
import { expect } from 'chai';
import { NLM_F_ACK, NLM_F_APPEND, NLM_F_CREATE, NLM_F_REQUEST } from '../../../src/netlink';
import type { BatchMessage } from '../../../src/netlink';
import {
  NFPROTO_IPV4,
  NFT_MSG_DELOBJ,
  NFT_MSG_DELSETELEM,
  NFT_MSG_NEWCHAIN,
  NFT_MSG_NEWOBJ,
  NFT_MSG_NEWRULE,
  NFT_MSG_NEWSET,
  NFT_MSG_NEWTABLE,
  NFT_OBJECT_QUOTA,
  nfgenmsg,
  nftMessageType,
} from '../../../src/kernel/nftables/constants';
import { NftBatch } from '../../../src/kernel/nftables/client';
import { decodeAttributes } from '../../../src/netlink';
import {
  objectAttributes,
  ruleAttributes,
  setAttributes,
  setElementListAttributes,
} from '../../../src/kernel/nftables/schema';
import { sameExpressions } from '../../../src/kernel/nftables/expressions';
import { commentOf, decodeUserdata } from '../../../src/kernel/nftables/userdata';
import {
  addressOfObject,
  quotaObjectName,
  quotaTableName,
  writeElement,
  writeNewQuota,
  writeSetUp,
} from '../../../src/kernel/quota';

function hex(text: string): Buffer {
  return Buffer.from(text.replace(/\s+/g, ''), 'hex');
}

// nft add table ip wg_peerd_wg0 '{ comment "wg-peerd: data caps of the peers of wg0; managed by wg-peerd, edits are undone"; }'
// nlmsg_type 0xa00, flags 0x1
const NEWTABLE = hex(`
    02000000 11000100 77675f70 65657264 5f776730 00000000 08000200 00000000
    55000600 004f7767 2d706565 72643a20 64617461 20636170 73206f66 20746865
    20706565 7273206f 66207767 303b206d 616e6167 65642062 79207767 2d706565
    72642c20 65646974 73206172 6520756e 646f6e65 00000000
`);

// nft add map ip wg_peerd_wg0 caps '{ type ipv4_addr : quota; }'
// nlmsg_type 0xa09, flags 0x401
const NEWSET = hex(`
    02000000 11000100 77675f70 65657264 5f776730 00000000 09000200 63617073
    00000000 08000300 00000040 08000400 00000007 08000500 00000004 08000f00
    00000002 08000a00 00000001 10000d00 00040200 00000604 00000000
`);

// nft add chain ip wg_peerd_wg0 from_peers '{ type filter hook prerouting priority 0; policy accept; }'
// nlmsg_type 0xa03, flags 0x401
const NEWCHAIN_FROM = hex(`
    02000000 11000100 77675f70 65657264 5f776730 00000000 0f000300 66726f6d
    5f706565 72730000 0b000700 66696c74 65720000 08000500 00000001 14000480
    08000100 00000000 08000200 00000000
`);

// nft add rule ip wg_peerd_wg0 from_peers iifname "wg0" quota name ip saddr map @caps drop comment "wg-peerd: count traffic from capped peers of wg0, drop it over the cap"
// nlmsg_type 0xa06, flags 0xc01
const NEWRULE_FROM = hex(`
    02000000 11000100 77675f70 65657264 5f776730 00000000 0f000200 66726f6d
    5f706565 72730000 f0000480 24000180 09000100 6d657461 00000000 14000280
    08000200 00000006 08000100 00000001 38000180 08000100 636d7000 2c000280
    08000100 00000001 08000200 00000000 18000380 14000100 77673000 00000000
    00000000 00000000 34000180 0c000100 7061796c 6f616400 24000280 08000100
    00000001 08000200 00000001 08000300 0000000c 08000400 00000004 2c000180
    0b000100 6f626a72 65660000 1c000280 08000300 00000001 08000400 63617073
    08000500 00000001 30000180 0e000100 696d6d65 64696174 65000000 1c000280
    08000100 00000000 10000280 0c000280 08000100 00000000 4d000700 00477767
    2d706565 72643a20 636f756e 74207472 61666669 63206672 6f6d2063 61707065
    64207065 65727320 6f662077 67302c20 64726f70 20697420 6f766572 20746865
    20636170 00000000
`);

// nft add chain ip wg_peerd_wg0 to_peers '{ type filter hook postrouting priority 0; policy accept; }'
// nlmsg_type 0xa03, flags 0x401
const NEWCHAIN_TO = hex(`
    02000000 11000100 77675f70 65657264 5f776730 00000000 0d000300 746f5f70
    65657273 00000000 0b000700 66696c74 65720000 08000500 00000001 14000480
    08000100 00000004 08000200 00000000
`);

// nft add rule ip wg_peerd_wg0 to_peers oifname "wg0" quota name ip daddr map @caps drop comment "wg-peerd: count traffic to capped peers of wg0, drop it over the cap"
// nlmsg_type 0xa06, flags 0xc01
const NEWRULE_TO = hex(`
    02000000 11000100 77675f70 65657264 5f776730 00000000 0d000200 746f5f70
    65657273 00000000 f0000480 24000180 09000100 6d657461 00000000 14000280
    08000200 00000007 08000100 00000001 38000180 08000100 636d7000 2c000280
    08000100 00000001 08000200 00000000 18000380 14000100 77673000 00000000
    00000000 00000000 34000180 0c000100 7061796c 6f616400 24000280 08000100
    00000001 08000200 00000001 08000300 00000010 08000400 00000004 2c000180
    0b000100 6f626a72 65660000 1c000280 08000300 00000001 08000400 63617073
    08000500 00000001 30000180 0e000100 696d6d65 64696174 65000000 1c000280
    08000100 00000000 10000280 0c000280 08000100 00000000 4b000700 00457767
    2d706565 72643a20 636f756e 74207472 61666669 6320746f 20636170 70656420
    70656572 73206f66 20776730 2c206472 6f702069 74206f76 65722074 68652063
    61700000
`);

// nft add quota ip wg_peerd_wg0 q_10_8_0_2 '{ over 1000000 bytes; comment "wg-peerd peer AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="; }'
// nlmsg_type 0xa12, flags 0x401
const NEWOBJ = hex(`
    02000000 11000100 77675f70 65657264 5f776730 00000000 0f000200 715f3130
    5f385f30 5f320000 08000300 00000002 41000800 003b7767 2d706565 72642070
    65657220 41414141 41414141 41414141 41414141 41414141 41414141 41414141
    41414141 41414141 41414141 4141413d 00000000 24000480 0c000100 00000000
    000f4240 0c000400 00000000 00000000 08000200 00000001
`);

// nft add element ip wg_peerd_wg0 caps '{ 10.8.0.2 : "q_10_8_0_2" }'
// nlmsg_type 0xa0c, flags 0x401
const NEWSETELEM = hex(`
    02000000 11000100 77675f70 65657264 5f776730 00000000 09000200 63617073
    00000000 08000400 00000001 24000380 20000180 0c000180 08000100 0a080002
    0f000900 715f3130 5f385f30 5f320000
`);

// nft delete element ip wg_peerd_wg0 caps '{ 10.8.0.2 }'
// nlmsg_type 0xa0e, flags 0x1
const DELSETELEM = hex(`
    02000000 11000100 77675f70 65657264 5f776730 00000000 09000200 63617073
    00000000 14000380 10000180 0c000180 08000100 0a080002
`);

// nft delete quota ip wg_peerd_wg0 q_10_8_0_2
// nlmsg_type 0xa14, flags 0x1
const DELOBJ = hex(`
    02000000 11000100 77675f70 65657264 5f776730 00000000 0f000200 715f3130
    5f385f30 5f320000 08000300 00000002 04000480
`);

const KEY = 'AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=';
const TABLE = 'wg_peerd_wg0';

/** The messages between BATCH_BEGIN and BATCH_END. */
function inner(batch: NftBatch): BatchMessage[] {
  return batch.toMessages().slice(1, -1);
}

function attributes(payload: Buffer): Buffer {
  return payload.subarray(nfgenmsg.size);
}

describe('nf_tables messages of the data caps, against nft 1.0.6', () => {
  const setUp = new NftBatch(NFPROTO_IPV4);
  writeSetUp(setUp, 'wg0');
  const messages = inner(setUp);

  it('sets up table, map, chains and rules in that order, then probes for nft_quota', () => {
    expect(messages.map((m) => m.type)).to.deep.equal(
      [
        NFT_MSG_NEWTABLE,
        NFT_MSG_NEWSET,
        NFT_MSG_NEWCHAIN,
        NFT_MSG_NEWRULE,
        NFT_MSG_NEWCHAIN,
        NFT_MSG_NEWRULE,
        NFT_MSG_NEWOBJ,
        NFT_MSG_DELOBJ,
      ].map(nftMessageType),
    );
    expect(quotaTableName('wg0')).to.equal(TABLE);
  });

  it('writes the table as nft does', () => {
    expect(messages[0].payload.toString('hex')).to.equal(NEWTABLE.toString('hex'));
  });

  it('writes both base chains as nft does (prerouting and postrouting, priority 0, accept)', () => {
    expect(messages[2].payload.toString('hex')).to.equal(NEWCHAIN_FROM.toString('hex'));
    expect(messages[4].payload.toString('hex')).to.equal(NEWCHAIN_TO.toString('hex'));
  });

  it('writes both rules as nft does: i/oifname, s/daddr, objref map lookup, drop', () => {
    expect(messages[3].payload.toString('hex')).to.equal(NEWRULE_FROM.toString('hex'));
    expect(messages[5].payload.toString('hex')).to.equal(NEWRULE_TO.toString('hex'));
  });

  it('declares the map as nft does: object map of quotas keyed by a 4-byte ipv4_addr', () => {
    const ours = decodeAttributes(setAttributes, attributes(messages[1].payload));
    const nfts = decodeAttributes(setAttributes, attributes(NEWSET));
    // nft adds a second userdata TLV (NFTNL_UDATA_SET_DATA_INTERVAL = 0) that only nft reads.
    const { userdata: ourUserdata, ...ourRest } = ours;
    const { userdata: nftUserdata, ...nftRest } = nfts;
    expect(ourRest).to.deep.equal(nftRest);
    expect(decodeUserdata(ourUserdata ?? Buffer.alloc(0))).to.deep.equal(
      decodeUserdata(nftUserdata ?? Buffer.alloc(0)).filter((tlv) => tlv.type === 0),
    );
  });

  it('creates a quota object as nft does: over N bytes, consumed 0, key as comment', () => {
    const batch = new NftBatch(NFPROTO_IPV4);
    writeNewQuota(batch, TABLE, { address: '10.8.0.2', publicKey: KEY }, 1_000_000n, 0n);
    const [object, element] = inner(batch);
    expect(object.type).to.equal(nftMessageType(NFT_MSG_NEWOBJ));
    expect(object.payload.toString('hex')).to.equal(NEWOBJ.toString('hex'));
    // nft names the set by NFTA_SET_ELEM_LIST_SET_ID too; the element list itself is the same.
    const ours = decodeAttributes(setElementListAttributes, attributes(element.payload));
    const nfts = decodeAttributes(setElementListAttributes, attributes(NEWSETELEM));
    const { setId, ...nftElements } = nfts;
    expect(setId).to.equal(1);
    expect(ours).to.deep.equal(nftElements);
  });

  it('adds a map element as nft does', () => {
    const batch = new NftBatch(NFPROTO_IPV4);
    writeElement(batch, TABLE, '10.8.0.2', 'q_10_8_0_2');
    const ours = decodeAttributes(setElementListAttributes, attributes(inner(batch)[0].payload));
    expect(ours.elements).to.deep.equal(
      decodeAttributes(setElementListAttributes, attributes(NEWSETELEM)).elements,
    );
  });

  it('deletes an element and an object as nft does', () => {
    const batch = new NftBatch(NFPROTO_IPV4);
    batch.deleteSetElements(
      { table: TABLE, set: 'caps', elements: [{ key: { value: Buffer.from([10, 8, 0, 2]) } }] },
      '10.8.0.2',
    );
    batch.deleteObject(TABLE, NFT_OBJECT_QUOTA, 'q_10_8_0_2', 'quota');
    const [element, object] = inner(batch);
    expect(element.type).to.equal(nftMessageType(NFT_MSG_DELSETELEM));
    expect(element.payload.toString('hex')).to.equal(DELSETELEM.toString('hex'));
    expect(object.type).to.equal(nftMessageType(NFT_MSG_DELOBJ));
    // nft sends an empty NFTA_OBJ_DATA along; the kernel looks objects up by table, name, type.
    const ours = decodeAttributes(objectAttributes, attributes(object.payload));
    const { data, ...nfts } = decodeAttributes(objectAttributes, attributes(DELOBJ));
    expect(data?.length).to.equal(0);
    expect(ours).to.deep.equal(nfts);
  });

  it("sends the message flags nft sends, and asks for an ACK on the transaction's last message only", () => {
    const create = NLM_F_REQUEST | NLM_F_CREATE;
    expect(messages[1].flags).to.equal(create); // nft: 0x401 for NEWSET
    expect(messages[2].flags).to.equal(create); // nft: 0x401 for NEWCHAIN
    expect(messages[3].flags & ~NLM_F_ACK).to.equal(create | NLM_F_APPEND); // nft: 0xc01 for NEWRULE
    const last = messages.length - 1;
    expect(messages.map((m) => m.ack)).to.deep.equal(messages.map((_, i) => i === last));
    expect(messages.map((m) => (m.flags & NLM_F_ACK) !== 0)).to.deep.equal(
      messages.map((_, i) => i === last),
    );
  });

  it('frames the batch with BATCH_BEGIN/END for subsystem 10 (res_id big-endian)', () => {
    const all = setUp.toMessages();
    for (const delimiter of [all[0], all[all.length - 1]]) {
      expect(delimiter.payload.toString('hex')).to.equal('0000000a'); // nft sends the same
      expect(delimiter.ack).to.equal(false);
    }
    expect(all[0].type).to.equal(0x10);
    expect(all[all.length - 1].type).to.equal(0x11);
  });

  it('decodes the expressions of nft rules into what the daemon compares with', () => {
    const from = decodeAttributes(ruleAttributes, attributes(NEWRULE_FROM));
    const ours = decodeAttributes(ruleAttributes, attributes(messages[3].payload));
    expect(from.expressions?.map((e) => e.name)).to.deep.equal([
      'meta',
      'cmp',
      'payload',
      'objref',
      'immediate',
    ]);
    expect(sameExpressions(from.expressions ?? [], ours.expressions ?? [])).to.equal(true);
    const to = decodeAttributes(ruleAttributes, attributes(NEWRULE_TO));
    expect(sameExpressions(to.expressions ?? [], ours.expressions ?? [])).to.equal(false);
  });
});

describe('names and userdata of the data caps', () => {
  it("reads the peer key from the comment nft wrote into a quota object's userdata", () => {
    const { userdata } = decodeAttributes(objectAttributes, attributes(NEWOBJ));
    expect(commentOf(userdata)).to.equal(`wg-peerd peer ${KEY}`);
  });

  it('names objects after the address, with only characters nft accepts in identifiers', () => {
    expect(quotaObjectName('10.8.0.2')).to.equal('q_10_8_0_2');
    expect(quotaObjectName('255.255.255.255')).to.match(/^[A-Za-z_][A-Za-z0-9_]*$/);
    expect(addressOfObject('q_10_8_0_2')).to.equal('10.8.0.2');
    expect(addressOfObject('q_192_168_100_254')).to.equal('192.168.100.254');
  });

  it('takes no object for a cap that quotaObjectName would not have written', () => {
    for (const name of ['q_010_8_0_2', 'q_256_8_0_2', 'q_10_8_0', 'wg_peerd_probe', 'monthly']) {
      expect(addressOfObject(name), name).to.equal(null);
    }
  });

  it('refuses interface names the kernel would refuse (IFNAMSIZ 16, no "/", no spaces)', () => {
    expect(quotaTableName('wg0')).to.equal('wg_peerd_wg0');
    expect(quotaTableName('a'.repeat(15))).to.equal(`wg_peerd_${'a'.repeat(15)}`);
    for (const name of ['', 'a'.repeat(16), 'wg/0', 'wg 0']) {
      expect(() => quotaTableName(name), JSON.stringify(name)).to.throw(TypeError);
    }
  });
});
