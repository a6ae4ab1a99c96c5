/**
 * Data caps of dual-stack peers (issue 18) on literal inputs: the rules of an inet table (what
 * `nft --debug=netlink` lists for `iifname "wg0" ip6 saddr ...` there: the meta nfproto check nft
 * inserts before an ip/ip6 payload in an inet table), the map caps6 and its elements, all
 * leading to the one quota object named after the peer's IPv4 address. Numbers from
 * /usr/include/linux/netfilter/nf_tables.h (NFT_META_NFPROTO 15) and netfilter.h (NFPROTO_IPV4
 * 2, NFPROTO_IPV6 10); IPv6 header offsets from RFC 8200 §3 (source 8, destination 24).
 */
import { expect } from 'chai';
import { NftBatch, decodeNftMessage } from '../../../src/kernel/nftables/client';
import {
  NFPROTO_INET,
  NFT_META_NFPROTO,
  NFT_OBJECT_QUOTA,
  NFT_SET_OBJECT,
} from '../../../src/kernel/nftables/constants';
import { setElementListAttributes } from '../../../src/kernel/nftables/schema';
import {
  DUAL_STACK_FAMILY,
  dualStackRule,
  elementTargets6,
  planElements6,
} from '../../../src/kernel/quota/dual-stack';
import { capsMap6, isCapsMap6 } from '../../../src/kernel/quota/maps';
import { CAPS_MAP6 } from '../../../src/kernel/quota/naming';
import { chainRules, chainSpecs } from '../../../src/kernel/quota/skeleton';
import { planCapTable } from '../../../src/kernel/quota/plan';
import { ipv6ToBytes } from '../../../src/kernel/ipv6';

const TABLE = 'wg_peerd_wg0';
const [FROM, TO] = chainSpecs('wg0');
const WG0 = Buffer.concat([Buffer.from('wg0'), Buffer.alloc(13)]);

describe('kernel/quota dual-stack: one quota object for both families (issue 18)', () => {
  it('puts the caps of a dual-stack interface in a table of family inet', () => {
    expect(DUAL_STACK_FAMILY).to.equal(NFPROTO_INET);
  });

  it('reads the IPv6 source from the peer after checking the packet is IPv6, into caps6', () => {
    expect(dualStackRule('wg0', FROM!, 6)).to.deep.equal([
      { name: 'meta', key: 6, dreg: 1 }, // iifname
      { name: 'cmp', sreg: 1, op: 0, data: { value: WG0 } },
      { name: 'meta', key: NFT_META_NFPROTO, dreg: 1 },
      { name: 'cmp', sreg: 1, op: 0, data: { value: Buffer.from([10]) } },
      { name: 'payload', dreg: 1, base: 1, offset: 8, len: 16 },
      { name: 'objref', setSreg: 1, setName: CAPS_MAP6 },
      { name: 'immediate', dreg: 0, data: { verdict: { code: 0 } } },
    ]);
  });

  it('reads the IPv6 destination to the peer, and the IPv4 addresses after an ipv4 check', () => {
    const to6 = dualStackRule('wg0', TO!, 6);
    expect(to6[0]).to.deep.equal({ name: 'meta', key: 7, dreg: 1 }); // oifname
    expect(to6[4]).to.deep.equal({ name: 'payload', dreg: 1, base: 1, offset: 24, len: 16 });
    const from4 = dualStackRule('wg0', FROM!, 4, 1);
    expect(from4[3]).to.deep.equal({
      name: 'cmp',
      sreg: 1,
      op: 0,
      data: { value: Buffer.from([2]) },
    });
    expect(from4[4]).to.deep.equal({ name: 'payload', dreg: 1, base: 1, offset: 12, len: 4 });
    expect(from4[5]).to.deep.equal({ name: 'objref', setSreg: 1, setName: 'caps', setId: 1 });
    expect(dualStackRule('wg0', TO!, 4)[4]).to.include({ offset: 16, len: 4 });
  });

  it('makes caps6 an object map of 16-byte keys to quota objects', () => {
    const map = capsMap6(TABLE, 2);
    expect(map).to.include({ name: 'caps6', flags: NFT_SET_OBJECT, keyLen: 16, keyType: 8, id: 2 });
    expect(map.objType).to.equal(NFT_OBJECT_QUOTA);
    expect(isCapsMap6(map)).to.equal(true);
    expect(isCapsMap6({ ...map, keyLen: 4 })).to.equal(false);
  });
});

const A = { address: '10.8.0.2', address6: 'fd42::2', publicKey: 'A' };
const B = { address: '10.8.0.3', address6: 'fd42::3', publicKey: 'B' };
const el = (address6: string, objref: string) => ({
  key: { value: ipv6ToBytes(address6) },
  objref,
});

function elements6(
  kept: Array<[string, string]>,
  live: Array<{ address: string; address6?: string; publicKey: string }>,
  present: ReturnType<typeof el>[],
) {
  const batch = new NftBatch(NFPROTO_INET);
  const repairs = planElements6(batch, TABLE, new Map(kept), live, present);
  return { batch, operations: batch.operations, repairs };
}

describe('kernel/quota dual-stack plan: the elements of caps6', () => {
  it('leads each capped dual-stack peer’s IPv6 address to the quota object of its IPv4 address', () => {
    const { batch, operations, repairs } = elements6([['10.8.0.2', 'q_10_8_0_2']], [A, B], []);
    expect(operations).to.deep.equal([`NFT_MSG_NEWSETELEM inet ${TABLE} caps6 1 element(s)`]);
    const [message] = batch.toMessages().slice(1, 2);
    const { type, flags, payload } = message!;
    const list = decodeNftMessage(
      setElementListAttributes,
      { type, flags, seq: 0, pid: 0, payload },
      'NEWSETELEM',
    );
    expect(list.set).to.equal('caps6');
    expect(elementTargets6(list.elements ?? [])).to.deep.equal(
      new Map([['fd42::2', 'q_10_8_0_2']]),
    );
    expect(repairs.map((r) => r.address)).to.deep.equal(['10.8.0.2']);
  });

  it('sends nothing when every element is in place', () => {
    const kept: Array<[string, string]> = [
      ['10.8.0.2', 'q_10_8_0_2'],
      ['10.8.0.3', 'q_10_8_0_3'],
    ];
    const present = [el('fd42::2', 'q_10_8_0_2'), el('fd42::3', 'q_10_8_0_3')];
    expect(elements6(kept, [A, B], present)).to.deep.include({ operations: [], repairs: [] });
  });

  it('removes, before anything else, elements of uncapped or gone peers and ones leading elsewhere', () => {
    const present = [
      el('fd42::2', 'q_10_8_0_9'), // leads to another peer's object
      el('fd42::3', 'q_10_8_0_3'), // B has no cap any more
      el('fd42::9', 'q_10_8_0_9'), // no such peer
    ];
    const { operations, repairs } = elements6([['10.8.0.2', 'q_10_8_0_2']], [A, B], present);
    expect(operations).to.deep.equal([
      `NFT_MSG_DELSETELEM inet ${TABLE} caps6 3 element(s)`,
      `NFT_MSG_NEWSETELEM inet ${TABLE} caps6 1 element(s)`,
    ]);
    expect(repairs.map((r) => r.address)).to.deep.equal([
      'fd42::2',
      'fd42::3',
      'fd42::9',
      '10.8.0.2',
    ]);
  });

  it('leaves an IPv4-only peer’s cap to the IPv4 map', () => {
    const v4only = { address: '10.8.0.4', publicKey: 'V' };
    expect(elements6([['10.8.0.4', 'q_10_8_0_4']], [v4only], [])).to.deep.include({
      operations: [],
      repairs: [],
    });
  });
});

describe('kernel/quota plan: the inet table of a dual-stack interface (issue 18)', () => {
  const specs = chainSpecs('wg0');
  const rulesOf = (dual: boolean) =>
    specs.map((spec) =>
      chainRules('wg0', spec, dual).map((expressions) => ({
        table: TABLE,
        chain: spec.name,
        expressions,
      })),
    );
  const chain = (name: string, hooknum: number) => ({
    table: TABLE,
    name,
    type: 'filter',
    hook: { hooknum, priority: 0 },
    policy: 1,
  });
  const map = { table: TABLE, name: 'caps', flags: NFT_SET_OBJECT, keyLen: 4, objType: 2 };
  const map6 = { ...map, name: 'caps6', keyLen: 16 };
  const A6 = { address: '10.8.0.2', address6: 'fd42::2', publicKey: 'A' };

  it('sets up an inet table with both maps and two rules per chain, one per family', () => {
    const { batch } = planCapTable('wg0', null, [], true);
    expect(batch.family).to.equal(NFPROTO_INET);
    expect(batch.operations).to.deep.equal([
      `NFT_MSG_NEWTABLE inet ${TABLE}`,
      `NFT_MSG_NEWSET inet ${TABLE} caps`,
      `NFT_MSG_NEWSET inet ${TABLE} caps6`,
      `NFT_MSG_NEWCHAIN inet ${TABLE} from_peers`,
      `NFT_MSG_NEWRULE inet ${TABLE} from_peers`,
      `NFT_MSG_NEWRULE inet ${TABLE} from_peers`,
      `NFT_MSG_NEWCHAIN inet ${TABLE} to_peers`,
      `NFT_MSG_NEWRULE inet ${TABLE} to_peers`,
      `NFT_MSG_NEWRULE inet ${TABLE} to_peers`,
      `NFT_MSG_NEWOBJ inet ${TABLE} quota wg_peerd_probe`,
      `NFT_MSG_DELOBJ inet ${TABLE} quota wg_peerd_probe`,
    ]);
  });

  it('restores a lost cap with its IPv6 element beside the IPv4 one', () => {
    const seen = { quotaBytes: 1000, usedBytes: 10 };
    const { batch } = planCapTable('wg0', null, [{ ...A6, lastSeen: seen }], true);
    expect(batch.operations.slice(11)).to.deep.equal([
      `NFT_MSG_NEWOBJ inet ${TABLE} quota q_10_8_0_2`,
      `NFT_MSG_NEWSETELEM inet ${TABLE} caps 10.8.0.2`,
      `NFT_MSG_NEWSETELEM inet ${TABLE} caps6 fd42::2`,
    ]);
  });

  it('sends nothing for an intact inet table, and adds a missing caps6 element', () => {
    const state = {
      set: map,
      set6: map6,
      chains: [chain('from_peers', 0), chain('to_peers', 4)],
      rules: rulesOf(true),
      objects: [{ table: TABLE, name: 'q_10_8_0_2', type: NFT_OBJECT_QUOTA }],
      elements: [{ key: { value: Buffer.from([10, 8, 0, 2]) }, objref: 'q_10_8_0_2' }],
      elements6: [el('fd42::2', 'q_10_8_0_2')],
    };
    expect(planCapTable('wg0', state, [A6], true).batch.operations).to.deep.equal([]);
    const missing = planCapTable('wg0', { ...state, elements6: [] }, [A6], true);
    expect(missing.batch.operations).to.deep.equal([
      `NFT_MSG_NEWSETELEM inet ${TABLE} caps6 1 element(s)`,
    ]);
  });

  it('gives chains that hold only the IPv4 rule (a table of before) their two rules', () => {
    const state = {
      set: map,
      set6: null,
      chains: [chain('from_peers', 0), chain('to_peers', 4)],
      rules: rulesOf(false),
      objects: [],
      elements: [],
      elements6: null,
    };
    expect(planCapTable('wg0', state, [], true).batch.operations).to.deep.equal([
      `NFT_MSG_NEWSET inet ${TABLE} caps6`,
      `NFT_MSG_DELRULE inet ${TABLE} from_peers`,
      `NFT_MSG_NEWRULE inet ${TABLE} from_peers`,
      `NFT_MSG_NEWRULE inet ${TABLE} from_peers`,
      `NFT_MSG_DELRULE inet ${TABLE} to_peers`,
      `NFT_MSG_NEWRULE inet ${TABLE} to_peers`,
      `NFT_MSG_NEWRULE inet ${TABLE} to_peers`,
    ]);
  });
});
