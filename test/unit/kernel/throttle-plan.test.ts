/**
 * Throttling after the cap, on literal inputs (the rate in the quota's userdata is
 * cap-userdata.test.ts's): the limit objects' data, and the throttle part of the caps table as a plan (each case gives what
 * was read and expects the transaction's messages, in order). What the kernel makes of them is
 * checked in the VM (test/kernel/throttle.test.ts).
 */
import { expect } from 'chai';
import { decodeAttributes, encodeAttributes } from '../../../src/netlink';
import type {
  ObjectAttributes,
  RuleAttributes,
  SetElementAttributes,
} from '../../../src/kernel/nftables/client';
import {
  NFT_LIMIT_F_INV,
  NFT_LIMIT_PKT_BYTES,
  NFT_OBJECT_LIMIT,
  NFT_OBJECT_QUOTA,
  NFT_QUOTA_F_INV,
  NFT_SET_OBJECT,
  NF_ACCEPT,
  NF_INET_POST_ROUTING,
  NF_INET_PRE_ROUTING,
} from '../../../src/kernel/nftables/constants';
import { limitAttributes, quotaAttributes } from '../../../src/kernel/nftables/schema';
import { type CapTableState, planCapTable } from '../../../src/kernel/quota/plan';
import { encodeCapUserdata } from '../../../src/kernel/quota/cap-userdata';
import { chainSpecs, ruleExpressions } from '../../../src/kernel/quota/skeleton';
import {
  THROTTLE_BURST_BYTES,
  type ThrottleState,
  addressOfLimit,
  limitData,
  limitRate,
  planThrottle,
  throttleChainSpecs,
  throttleRules,
} from '../../../src/kernel/quota/throttle';
import { NftBatch } from '../../../src/kernel/nftables/client';

const IF = 'wg0';
const TABLE = 'wg_peerd_wg0';
const KEY_A = 'AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=';

describe('kernel/quota throttle: limit objects', () => {
  it('are byte limits, per second, burst 64 KiB, inverted (`rate over`)', () => {
    expect(decodeAttributes(limitAttributes, limitData(5000), 'limit')).to.deep.equal({
      rate: 5000n,
      unit: 1n,
      burst: THROTTLE_BURST_BYTES,
      type: NFT_LIMIT_PKT_BYTES,
      flags: NFT_LIMIT_F_INV,
    });
  });

  it('read back their rate only when every other field is ours', () => {
    const object = (data: Buffer): ObjectAttributes => ({
      table: TABLE,
      name: 'tu_10_8_0_2',
      type: NFT_OBJECT_LIMIT,
      data,
    });
    expect(limitRate(object(limitData(5000)))).to.equal(5000);
    const packets = encodeAttributes(limitAttributes, {
      rate: 5000n,
      unit: 1n,
      burst: THROTTLE_BURST_BYTES,
      type: 0, // NFT_LIMIT_PKTS
      flags: NFT_LIMIT_F_INV,
    });
    expect(limitRate(object(packets))).to.equal(null);
  });

  it('are named per address and direction, and only canonical names map back', () => {
    expect(addressOfLimit('tu_10_8_0_2')).to.equal('10.8.0.2');
    expect(addressOfLimit('td_10_8_0_255')).to.equal('10.8.0.255');
    expect(addressOfLimit('tu_10_8_0_02')).to.equal(null);
    expect(addressOfLimit('tx_10_8_0_2')).to.equal(null);
    expect(addressOfLimit('q_10_8_0_2')).to.equal(null);
  });
});

// ------------------------------------------------------------ the plan

const target = (rate: number) => ({ quota: 'q_10_8_0_2', bytesPerSecond: rate });

function element(address: string, objref: string): SetElementAttributes {
  return { key: { value: Buffer.from(address.split('.').map(Number)) }, objref };
}

function limit(name: string, rate: number): ObjectAttributes {
  return { table: TABLE, name, type: NFT_OBJECT_LIMIT, data: limitData(rate) };
}

/** An intact throttle part holding 10.8.0.2 at `rate`. */
function intactThrottle(rate: number): ThrottleState {
  const specs = throttleChainSpecs(IF);
  return {
    sets: [
      { table: TABLE, name: 'throttle_caps', flags: NFT_SET_OBJECT, keyLen: 4, objType: 2 },
      { table: TABLE, name: 'throttle_up', flags: NFT_SET_OBJECT, keyLen: 4, objType: 4 },
      { table: TABLE, name: 'throttle_down', flags: NFT_SET_OBJECT, keyLen: 4, objType: 4 },
    ],
    chains: specs.map((spec) => ({
      table: TABLE,
      name: spec.name,
      type: 'filter',
      hook: { hooknum: spec.hooknum, priority: 0 },
      policy: NF_ACCEPT,
    })),
    rules: specs.map((spec): RuleAttributes[] => [
      { table: TABLE, chain: spec.name, expressions: throttleRules(IF, spec, false)[0]! },
    ]),
    limits: [limit('tu_10_8_0_2', rate), limit('td_10_8_0_2', rate)],
    elements: [
      [element('10.8.0.2', 'q_10_8_0_2')],
      [element('10.8.0.2', 'tu_10_8_0_2')],
      [element('10.8.0.2', 'td_10_8_0_2')],
    ],
  };
}

function operations(
  state: ThrottleState | null,
  wanted: Map<string, ReturnType<typeof target>>,
  replaced: string[] = [],
): string[] {
  const plan = planThrottle(IF, TABLE, state, wanted, null, { replaced });
  const batch = new NftBatch(2);
  plan.removals(batch);
  batch.newObject({ table: TABLE, name: '(quota objects go here)', type: 2 }, 'quota');
  plan.additions(batch);
  return batch.operations;
}

const QUOTAS = `NFT_MSG_NEWOBJ ip ${TABLE} quota (quota objects go here)`;

describe('kernel/quota throttle plan', () => {
  it('on a table without it: maps, then chains and rules naming them, then limits and elements', () => {
    expect(operations(null, new Map([['10.8.0.2', target(5000)]]))).to.deep.equal([
      `NFT_MSG_NEWSET ip ${TABLE} throttle_caps`,
      `NFT_MSG_NEWSET ip ${TABLE} throttle_up`,
      `NFT_MSG_NEWSET ip ${TABLE} throttle_down`,
      `NFT_MSG_NEWCHAIN ip ${TABLE} throttle_from_peers`,
      `NFT_MSG_NEWRULE ip ${TABLE} throttle_from_peers`,
      `NFT_MSG_NEWCHAIN ip ${TABLE} throttle_to_peers`,
      `NFT_MSG_NEWRULE ip ${TABLE} throttle_to_peers`,
      QUOTAS,
      `NFT_MSG_NEWOBJ ip ${TABLE} limit tu_10_8_0_2`,
      `NFT_MSG_NEWOBJ ip ${TABLE} limit td_10_8_0_2`,
      `NFT_MSG_NEWSETELEM ip ${TABLE} throttle_caps 1 element(s)`,
      `NFT_MSG_NEWSETELEM ip ${TABLE} throttle_up 1 element(s)`,
      `NFT_MSG_NEWSETELEM ip ${TABLE} throttle_down 1 element(s)`,
    ]);
  });

  it('on a dual-stack table: the IPv6 maps too, a rule per family, the /128 leading to the same objects', () => {
    const wanted = new Map([['10.8.0.2', { ...target(5000), address6: 'fd00::2' }]]);
    const plan = planThrottle(IF, TABLE, null, wanted, null, { dual: true });
    const batch = new NftBatch(1); // NFPROTO_INET
    plan.removals(batch);
    plan.additions(batch);
    expect(batch.operations).to.deep.equal([
      `NFT_MSG_NEWSET inet ${TABLE} throttle_caps`,
      `NFT_MSG_NEWSET inet ${TABLE} throttle_up`,
      `NFT_MSG_NEWSET inet ${TABLE} throttle_down`,
      `NFT_MSG_NEWSET inet ${TABLE} throttle_caps6`,
      `NFT_MSG_NEWSET inet ${TABLE} throttle_up6`,
      `NFT_MSG_NEWSET inet ${TABLE} throttle_down6`,
      `NFT_MSG_NEWCHAIN inet ${TABLE} throttle_from_peers`,
      `NFT_MSG_NEWRULE inet ${TABLE} throttle_from_peers`,
      `NFT_MSG_NEWRULE inet ${TABLE} throttle_from_peers`,
      `NFT_MSG_NEWCHAIN inet ${TABLE} throttle_to_peers`,
      `NFT_MSG_NEWRULE inet ${TABLE} throttle_to_peers`,
      `NFT_MSG_NEWRULE inet ${TABLE} throttle_to_peers`,
      `NFT_MSG_NEWOBJ inet ${TABLE} limit tu_10_8_0_2`,
      `NFT_MSG_NEWOBJ inet ${TABLE} limit td_10_8_0_2`,
      `NFT_MSG_NEWSETELEM inet ${TABLE} throttle_caps 1 element(s)`,
      `NFT_MSG_NEWSETELEM inet ${TABLE} throttle_up 1 element(s)`,
      `NFT_MSG_NEWSETELEM inet ${TABLE} throttle_down 1 element(s)`,
      `NFT_MSG_NEWSETELEM inet ${TABLE} throttle_caps6 1 element(s)`,
      `NFT_MSG_NEWSETELEM inet ${TABLE} throttle_up6 1 element(s)`,
      `NFT_MSG_NEWSETELEM inet ${TABLE} throttle_down6 1 element(s)`,
    ]);
    const [up] = throttleChainSpecs(IF);
    const [rule4, rule6] = throttleRules(IF, up!, true);
    // meta nfproto first, then the family's source address: 4 bytes at 12, 16 bytes at 8.
    expect(rule4!.slice(2, 5)).to.deep.equal([
      { name: 'meta', key: 15, dreg: 1 },
      { name: 'cmp', sreg: 1, op: 0, data: { value: Buffer.from([2]) } },
      { name: 'payload', base: 1, offset: 12, len: 4, dreg: 1 },
    ]);
    expect(rule6!.slice(4)).to.deep.equal([
      { name: 'payload', base: 1, offset: 8, len: 16, dreg: 1 },
      { name: 'objref', setSreg: 1, setName: 'throttle_caps6' },
      { name: 'objref', setSreg: 1, setName: 'throttle_up6' },
      { name: 'immediate', dreg: 0, data: { verdict: { code: 0 } } },
    ]);
  });

  it('the rules: address → quota over the cap → limit over the rate → drop, per direction', () => {
    const [up, down] = throttleChainSpecs(IF);
    expect(up).to.include({ hooknum: NF_INET_PRE_ROUTING, name: 'throttle_from_peers' });
    expect(down).to.include({ hooknum: NF_INET_POST_ROUTING, name: 'throttle_to_peers' });
    for (const [spec, limits] of [
      [up!, 'throttle_up'],
      [down!, 'throttle_down'],
    ] as const) {
      const [expressions, ...more] = throttleRules(IF, spec, false);
      expect(more).to.deep.equal([]);
      const cap = chainSpecs(IF).find((c) => c.hooknum === spec.hooknum)!;
      // The same interface and address match as the caps' own rule on that hook...
      expect(expressions!.slice(0, 3)).to.deep.equal(ruleExpressions(IF, cap).slice(0, 3));
      // ...then the two object maps and the verdict.
      expect(expressions!.slice(3)).to.deep.equal([
        { name: 'objref', setSreg: 1, setName: 'throttle_caps' },
        { name: 'objref', setSreg: 1, setName: limits },
        { name: 'immediate', dreg: 0, data: { verdict: { code: 0 } } },
      ]);
    }
  });

  it('sends nothing when everything is in place at the rate wanted', () => {
    expect(operations(intactThrottle(5000), new Map([['10.8.0.2', target(5000)]]))).to.deep.equal([
      QUOTAS,
    ]);
  });

  it('a new rate replaces both limits: elements out, objects out, objects in, elements in', () => {
    expect(operations(intactThrottle(5000), new Map([['10.8.0.2', target(9000)]]))).to.deep.equal([
      `NFT_MSG_DELSETELEM ip ${TABLE} throttle_up 1 element(s)`,
      `NFT_MSG_DELSETELEM ip ${TABLE} throttle_down 1 element(s)`,
      `NFT_MSG_DELOBJ ip ${TABLE} limit tu_10_8_0_2`,
      `NFT_MSG_DELOBJ ip ${TABLE} limit td_10_8_0_2`,
      QUOTAS,
      `NFT_MSG_NEWOBJ ip ${TABLE} limit tu_10_8_0_2`,
      `NFT_MSG_NEWOBJ ip ${TABLE} limit td_10_8_0_2`,
      `NFT_MSG_NEWSETELEM ip ${TABLE} throttle_up 1 element(s)`,
      `NFT_MSG_NEWSETELEM ip ${TABLE} throttle_down 1 element(s)`,
    ]);
  });

  it('back to block removes the peer elements, then its limits, and keeps the skeleton', () => {
    expect(operations(intactThrottle(5000), new Map())).to.deep.equal([
      `NFT_MSG_DELSETELEM ip ${TABLE} throttle_caps 1 element(s)`,
      `NFT_MSG_DELSETELEM ip ${TABLE} throttle_up 1 element(s)`,
      `NFT_MSG_DELSETELEM ip ${TABLE} throttle_down 1 element(s)`,
      `NFT_MSG_DELOBJ ip ${TABLE} limit tu_10_8_0_2`,
      `NFT_MSG_DELOBJ ip ${TABLE} limit td_10_8_0_2`,
      QUOTAS,
    ]);
  });

  it('a quota object replaced in the batch gets its throttle_caps element out before and back after', () => {
    expect(
      operations(intactThrottle(5000), new Map([['10.8.0.2', target(5000)]]), ['10.8.0.2']),
    ).to.deep.equal([
      `NFT_MSG_DELSETELEM ip ${TABLE} throttle_caps 1 element(s)`,
      QUOTAS,
      `NFT_MSG_NEWSETELEM ip ${TABLE} throttle_caps 1 element(s)`,
    ]);
  });
});

describe('kernel/quota plan with a throttling cap', () => {
  const throttling: ObjectAttributes = {
    table: TABLE,
    name: 'q_10_8_0_2',
    type: NFT_OBJECT_QUOTA,
    data: encodeAttributes(quotaAttributes, { bytes: 1000n, consumed: 0n, flags: NFT_QUOTA_F_INV }),
    userdata: encodeCapUserdata({
      owner: KEY_A,
      plan: null,
      throttleBytesPerSecond: 5000,
      others: [],
    }),
  };
  const caps = (elements: SetElementAttributes[]): CapTableState => ({
    set: { table: TABLE, name: 'caps', flags: NFT_SET_OBJECT, keyLen: 4, objType: 2 },
    chains: chainSpecs(IF).map((spec) => ({
      table: TABLE,
      name: spec.name,
      type: 'filter',
      hook: { hooknum: spec.hooknum, priority: 0 },
      policy: NF_ACCEPT,
    })),
    rules: chainSpecs(IF).map((spec) => [
      { table: TABLE, chain: spec.name, expressions: ruleExpressions(IF, spec) },
    ]),
    objects: [throttling],
    elements,
    throttle: intactThrottle(5000),
  });
  const live = [{ address: '10.8.0.2', publicKey: KEY_A }];

  it('never puts its element into caps (whose rule drops), and sends nothing when intact', () => {
    const { batch, repairs } = planCapTable(IF, caps([]), live);
    expect(batch.operations).to.deep.equal([]);
    expect(repairs).to.deep.equal([]);
  });

  it('takes its element out of caps, where it would be cut off instead of slowed', () => {
    const { batch } = planCapTable(IF, caps([element('10.8.0.2', 'q_10_8_0_2')]), live);
    expect(batch.operations).to.deep.equal([`NFT_MSG_DELSETELEM ip ${TABLE} caps 1 element(s)`]);
  });

  it('puts back lost limits from the record, and reports it', () => {
    const state = caps([]);
    state.throttle = { ...intactThrottle(5000), limits: [], elements: [[], [], []] };
    state.throttle.elements[0] = [element('10.8.0.2', 'q_10_8_0_2')];
    const { batch, repairs } = planCapTable(IF, state, live);
    expect(batch.operations).to.deep.equal([
      `NFT_MSG_NEWOBJ ip ${TABLE} limit tu_10_8_0_2`,
      `NFT_MSG_NEWOBJ ip ${TABLE} limit td_10_8_0_2`,
      `NFT_MSG_NEWSETELEM ip ${TABLE} throttle_up 1 element(s)`,
      `NFT_MSG_NEWSETELEM ip ${TABLE} throttle_down 1 element(s)`,
    ]);
    expect(repairs).to.have.length(1);
    expect(repairs[0]).to.include({ address: '10.8.0.2' });
  });

  it('restores a lost table with the throttle from what the daemon last saw', () => {
    const seen = { quotaBytes: 1000, usedBytes: 1000, throttleBytesPerSecond: 5000 };
    const { batch, repairs } = planCapTable(IF, null, [{ ...live[0]!, lastSeen: seen }]);
    expect(batch.operations.slice(8)).to.deep.equal([
      `NFT_MSG_NEWOBJ ip ${TABLE} quota q_10_8_0_2`,
      `NFT_MSG_NEWSET ip ${TABLE} throttle_caps`,
      `NFT_MSG_NEWSET ip ${TABLE} throttle_up`,
      `NFT_MSG_NEWSET ip ${TABLE} throttle_down`,
      `NFT_MSG_NEWCHAIN ip ${TABLE} throttle_from_peers`,
      `NFT_MSG_NEWRULE ip ${TABLE} throttle_from_peers`,
      `NFT_MSG_NEWCHAIN ip ${TABLE} throttle_to_peers`,
      `NFT_MSG_NEWRULE ip ${TABLE} throttle_to_peers`,
      `NFT_MSG_NEWOBJ ip ${TABLE} limit tu_10_8_0_2`,
      `NFT_MSG_NEWOBJ ip ${TABLE} limit td_10_8_0_2`,
      `NFT_MSG_NEWSETELEM ip ${TABLE} throttle_caps 1 element(s)`,
      `NFT_MSG_NEWSETELEM ip ${TABLE} throttle_up 1 element(s)`,
      `NFT_MSG_NEWSETELEM ip ${TABLE} throttle_down 1 element(s)`,
    ]);
    expect(repairs[0]!.done).to.match(/throttled to 5000 B\/s over it/);
  });
});
