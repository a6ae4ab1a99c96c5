/**
 * The data caps replayed from transcripts recorded in the VM, checked against what
 * `nft -j list table ...` reported at the same moments (the oracle), never against our own output.
 */
import { expect } from 'chai';
import type { KernelDataCap } from '../../../src/kernel/types';
import { replay } from '../../support/transcripts';
import {
  CAPS_IF,
  KEY_A,
  KEY_B,
  KEY_C,
  PEER_A,
  PEER_B,
  PING_PACKET_BYTES,
  type QuotaCapsResult,
  type QuotaSetUpResult,
  SETUP_IF,
  quotaCaps,
  quotaSetUp,
} from '../../transcripts/quota';

// The shapes of `nft -j` output (libnftables JSON schema 1) that the checks read.
interface NftTable {
  family: string;
  name: string;
  flags?: string | string[];
}
interface NftChain {
  table: string;
  name: string;
  type: string;
  hook: string;
  prio: number;
  policy: string;
}
interface NftMap {
  table: string;
  name: string;
  type: string;
  map: string;
  elem?: Array<[string, string]>;
}
interface NftQuota {
  table: string;
  name: string;
  bytes: number;
  used: number;
  inv?: boolean;
  comment?: string;
}
interface NftRule {
  table: string;
  chain: string;
  expr: unknown[];
}
type NftEntry = {
  table?: NftTable;
  chain?: NftChain;
  map?: NftMap;
  quota?: NftQuota;
  rule?: NftRule;
};

function entries(oracle: Record<string, unknown>, key: string): NftEntry[] {
  const value = oracle[key] as { nftables?: NftEntry[] } | undefined;
  if (!value?.nftables) throw new Error(`the oracle has no nft output "${key}"`);
  return value.nftables;
}
const pick = <K extends keyof NftEntry>(
  list: NftEntry[],
  kind: K,
): Array<NonNullable<NftEntry[K]>> =>
  list.flatMap((entry) => (entry[kind] ? [entry[kind] as NonNullable<NftEntry[K]>] : []));

/** address → cap as nft shows it: the address from the map's elements, the numbers from the quota. */
function capsFromNft(list: NftEntry[]): Record<string, KernelDataCap> {
  const quotas = new Map(pick(list, 'quota').map((q) => [q.name, q]));
  // A quota the map leads packets to is enforced.
  const caps: Record<string, KernelDataCap> = {};
  for (const [address, objectName] of pick(list, 'map').find((m) => m.name === 'caps')?.elem ??
    []) {
    const quota = quotas.get(objectName);
    if (quota) caps[address] = { quotaBytes: quota.bytes, usedBytes: quota.used, enforced: true };
  }
  return caps;
}

/** The table, map, chains and rules of the design, as nft reads them back from the kernel. */
function expectLayout(list: NftEntry[], ifname: string): void {
  const table = `wg_peerd_${ifname}`;
  const tables = pick(list, 'table');
  expect(tables.map((t) => [t.family, t.name])).to.deep.equal([['ip', table]]);
  expect(tables[0].flags ?? []).to.not.include('dormant');
  const [map] = pick(list, 'map');
  expect(map).to.include({ name: 'caps', type: 'ipv4_addr', map: 'quota' });
  const chains = pick(list, 'chain').map(({ name, type, hook, prio, policy }) => ({
    name,
    type,
    hook,
    prio,
    policy,
  }));
  expect(chains).to.have.deep.members([
    { name: 'from_peers', type: 'filter', hook: 'prerouting', prio: 0, policy: 'accept' },
    { name: 'to_peers', type: 'filter', hook: 'postrouting', prio: 0, policy: 'accept' },
  ]);
  const rules = pick(list, 'rule');
  expect(rules.map((r) => r.chain)).to.have.members(['from_peers', 'to_peers']);
  const ruleOf = (chain: string): unknown[] => rules.find((r) => r.chain === chain)?.expr ?? [];
  const lookup = (metaKey: string, field: string): unknown[] => [
    { match: { op: '==', left: { meta: { key: metaKey } }, right: ifname } },
    { quota: { map: { key: { payload: { protocol: 'ip', field } }, data: '@caps' } } },
    { drop: null },
  ];
  expect(ruleOf('from_peers')).to.deep.equal(lookup('iifname', 'saddr'));
  expect(ruleOf('to_peers')).to.deep.equal(lookup('oifname', 'daddr'));
  // The set-up's probe object is created and deleted in the same transaction.
  expect(pick(list, 'quota').map((q) => q.name)).to.not.include('wg_peerd_probe');
}

describe('data caps: table set-up and repair (recorded transcript)', () => {
  let result: QuotaSetUpResult;
  let oracle: Record<string, unknown>;

  before(async () => {
    ({ result, oracle } = await replay(quotaSetUp));
  });

  it('creates table, map, chains and rules in one transaction, as nft lists them', () => {
    expect(result.batches.setUp).to.equal(1);
    expectLayout(entries(oracle, 'afterSetUp'), SETUP_IF);
  });

  it('sends nothing but reads when everything is intact', () => {
    expect(result.batches.intact).to.equal(0);
    expect(result.batches.intactAgain).to.equal(0);
  });

  it('repairs a deleted chain, a flushed rule, a foreign rule and a drop policy', () => {
    expect(result.batches.chainsRepaired).to.equal(1);
    expectLayout(entries(oracle, 'afterChainRepair'), SETUP_IF);
  });

  it('rebuilds a deleted map with an element for every cap, keeping the caps', () => {
    expect(result.batches.mapRepaired).to.equal(1);
    const list = entries(oracle, 'afterMapRepair');
    expectLayout(list, SETUP_IF);
    expect(pick(list, 'map')[0].elem).to.deep.equal([['10.77.0.2', 'q_10_77_0_2']]);
    expect(result.capsAfterMapRepair).to.deep.equal(capsFromNft(list));
    expect(result.capsAfterMapRepair['10.77.0.2']?.quotaBytes).to.equal(123456);
  });

  it('puts back a map element deleted by hand', () => {
    expect(pick(entries(oracle, 'afterElementRepair'), 'map')[0].elem).to.deep.equal([
      ['10.77.0.2', 'q_10_77_0_2'],
    ]);
  });

  it('wakes a dormant table and rebuilds a chain moved to another hook', () => {
    expect(result.batches.hookAndFlagsRepaired).to.equal(2);
    expectLayout(entries(oracle, 'afterHookRepair'), SETUP_IF);
  });

  it("leaves the operator's own table exactly as it was", () => {
    expect(entries(oracle, 'operatorAfter')).to.deep.equal(entries(oracle, 'operatorBefore'));
    expect(pick(entries(oracle, 'operatorAfter'), 'rule')).to.have.length(1);
  });
});

describe('data caps: set, count, change, run out, raise, remove (recorded transcript)', () => {
  let result: QuotaCapsResult;
  let oracle: Record<string, unknown>;
  const quotaOf = (step: string, name: string): NftQuota | undefined =>
    pick(entries(oracle, step), 'quota').find((q) => q.name === name);
  const QA = `q_${PEER_A.replace(/\./g, '_')}`;
  const QB = `q_${PEER_B.replace(/\./g, '_')}`;
  const pair = PING_PACKET_BYTES * 2; // an echo request and its reply

  before(async () => {
    ({ result, oracle } = await replay(quotaCaps));
  });

  it('lists at every step exactly the caps and bytes used that nft reports', () => {
    for (const step of [
      'empty',
      'set',
      'counted',
      'lowered',
      'depleted',
      'raised',
      'countedAgain',
      'secondPeer',
      'otherKey',
      'removed',
    ]) {
      expect(result.caps[step], step).to.deep.equal(capsFromNft(entries(oracle, step)));
    }
    expect(result.caps.empty).to.deep.equal({});
  });

  it('reads the caps map again only after a transaction: counting alone leaves it as it was', () => {
    // Issue 29: the map changes only by transactions, which advance the ruleset generation.
    expect(result.mapReads).to.deep.equal({
      empty: 0, // no object, no map to read
      set: 1,
      counted: 0, // ping only
      lowered: 1,
      depleted: 0, // ping only
      raised: 1,
      countedAgain: 0, // ping only
      secondPeer: 1,
      otherKey: 1,
      removed: 1,
    });
  });

  it('creates an "over" quota carrying the peer key, reached through the map', () => {
    expect(result.batches.set).to.equal(1);
    expect(quotaOf('set', QA)).to.deep.include({
      bytes: 20_000,
      used: 0,
      inv: true,
      comment: `wg-peerd peer ${KEY_A}`,
    });
    expectLayout(entries(oracle, 'set'), CAPS_IF);
  });

  it('counts both directions against the one quota', () => {
    expect(quotaOf('counted', QA)?.used).to.equal(5 * pair);
  });

  it('changes the cap in place and keeps the bytes used', () => {
    expect(result.batches.lowered).to.equal(1);
    expect(quotaOf('lowered', QA)).to.deep.include({ bytes: 15_000, used: 5 * pair });
  });

  it('stops counting at the cap once traffic goes beyond it', () => {
    expect(quotaOf('depleted', QA)).to.deep.include({ bytes: 15_000, used: 15_000 });
  });

  it('raises the cap of an exhausted peer keeping what was used, and lets traffic through', () => {
    expect(result.batches.raised).to.equal(1);
    expect(quotaOf('raised', QA)).to.deep.include({ bytes: 25_000, used: 15_000 });
    // Three more echo pairs got through and were counted from 15,000 on.
    expect(quotaOf('countedAgain', QA)?.used).to.equal(15_000 + 3 * pair);
  });

  it('starts from zero when the address belongs to another key', () => {
    expect(quotaOf('secondPeer', QB)).to.deep.include({ used: 2 * pair });
    expect(result.batches.otherKey).to.equal(1);
    expect(quotaOf('otherKey', QB)).to.deep.include({
      bytes: 60_000,
      used: 0,
      comment: `wg-peerd peer ${KEY_C}`,
    });
    expect(JSON.stringify(entries(oracle, 'otherKey'))).to.not.contain(KEY_B);
  });

  it('removes the element and the object, leaving nothing of the address', () => {
    expect(result.batches.removed).to.equal(1);
    const text = JSON.stringify(entries(oracle, 'removed'));
    expect(text).to.not.contain(PEER_A);
    expect(text).to.not.contain(QA);
    expect(text).to.not.contain(KEY_A);
    expectLayout(entries(oracle, 'removed'), CAPS_IF);
    expect(result.batches.removedAgain).to.equal(0);
  });

  it('reads the same caps and usage with a new socket, as after a restart', () => {
    expect(result.caps.restarted).to.deep.equal(capsFromNft(entries(oracle, 'removed')));
    expect(result.batches.ensureAfterRestart).to.equal(0);
  });
});
