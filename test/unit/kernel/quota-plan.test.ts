/**
 * The data-cap reconciliation plan on literal kernel states (as wgctrl-go's configure_linux_test
 * checks its request building): each case gives what `ensure` read and the live peers, and
 * expects the transaction's messages, in order, and the repairs reported. What the kernel makes
 * of those messages is checked by the recorded transcripts (quota.replay.test.ts) and the VM.
 */
import { expect } from 'chai';
import { encodeAttributes } from '../../../src/netlink';
import type {
  ChainAttributes,
  ObjectAttributes,
  RuleAttributes,
  SetElementAttributes,
} from '../../../src/kernel/nftables/client';
import {
  NFT_OBJECT_QUOTA,
  NFT_QUOTA_F_DEPLETED,
  NFT_QUOTA_F_INV,
  NFT_SET_OBJECT,
  NF_ACCEPT,
  NF_DROP,
  NF_INET_POST_ROUTING,
  NF_INET_PRE_ROUTING,
} from '../../../src/kernel/nftables/constants';
import { quotaAttributes } from '../../../src/kernel/nftables/schema';
import { commentUserdata } from '../../../src/kernel/nftables/userdata';
import { type CapTableState, planCapTable } from '../../../src/kernel/quota/plan';
import { chainSpecs, ruleExpressions } from '../../../src/kernel/quota/skeleton';
import type { CapRef } from '../../../src/kernel/types';

const IF = 'wg0';
const TABLE = 'wg_peerd_wg0';
const KEY_A = 'AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=';
const KEY_B = 'BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBA=';
const KEY_X = 'XXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXA=';

// ------------------------------------------------------------ literal kernel state

function chain(name: string, hooknum: number, policy = NF_ACCEPT): ChainAttributes {
  return { table: TABLE, name, type: 'filter', hook: { hooknum, priority: 0 }, policy };
}
const FROM = chain('from_peers', NF_INET_PRE_ROUTING);
const TO = chain('to_peers', NF_INET_POST_ROUTING);
/** The one rule each chain holds when intact: what nft shows as `quota name ip s/daddr map @caps drop`. */
const ourRules = (): RuleAttributes[][] =>
  chainSpecs(IF).map((spec) => [
    { table: TABLE, chain: spec.name, expressions: ruleExpressions(IF, spec) },
  ]);

function quota(address: string, owner: string | null, bytes: bigint, used = 0n): ObjectAttributes {
  const flags = NFT_QUOTA_F_INV | (used >= bytes ? NFT_QUOTA_F_DEPLETED : 0);
  return {
    table: TABLE,
    name: `q_${address.replaceAll('.', '_')}`,
    type: NFT_OBJECT_QUOTA,
    data: encodeAttributes(quotaAttributes, { bytes, consumed: used, flags }),
    userdata: owner === null ? undefined : commentUserdata(`wg-peerd peer ${owner}`),
  };
}

function element(address: string, objref: string): SetElementAttributes {
  return { key: { value: Buffer.from(address.split('.').map(Number)) }, objref };
}

/** An intact table holding the given objects, each reachable through its element. */
function intact(objects: ObjectAttributes[]): CapTableState {
  return {
    set: {
      table: TABLE,
      name: 'caps',
      flags: NFT_SET_OBJECT,
      keyLen: 4,
      objType: NFT_OBJECT_QUOTA,
    },
    chains: [FROM, TO],
    rules: ourRules(),
    objects,
    elements: objects.map((o) => element(o.name!.slice(2).replaceAll('_', '.'), o.name!)),
    throttle: null,
  };
}

const peer = (address: string, publicKey: string, lastSeen?: CapRef['lastSeen']): CapRef => ({
  address,
  publicKey,
  lastSeen,
});

function plan(state: CapTableState | null, live: CapRef[] | null) {
  const { batch, repairs } = planCapTable(IF, state, live);
  return { operations: batch.operations, repairs };
}

// ------------------------------------------------------------ cases

describe('kernel/quota plan: the set-up of a table that is missing', () => {
  it('creates table, map, both chains with their rules, and probes nft_quota', () => {
    expect(plan(null, []).operations).to.deep.equal([
      `NFT_MSG_NEWTABLE ip ${TABLE}`,
      `NFT_MSG_NEWSET ip ${TABLE} caps`,
      `NFT_MSG_NEWCHAIN ip ${TABLE} from_peers`,
      `NFT_MSG_NEWRULE ip ${TABLE} from_peers`,
      `NFT_MSG_NEWCHAIN ip ${TABLE} to_peers`,
      `NFT_MSG_NEWRULE ip ${TABLE} to_peers`,
      `NFT_MSG_NEWOBJ ip ${TABLE} quota wg_peerd_probe`,
      `NFT_MSG_DELOBJ ip ${TABLE} quota wg_peerd_probe`,
    ]);
  });

  it('restores the cap of each live peer the daemon saw, and only those, in the same transaction', () => {
    const seen = { quotaBytes: 1_000_000, usedBytes: 250_000 };
    const { operations, repairs } = plan(null, [
      peer('10.8.0.2', KEY_A, seen),
      peer('10.8.0.3', KEY_B),
    ]);
    expect(operations.slice(8)).to.deep.equal([
      `NFT_MSG_NEWOBJ ip ${TABLE} quota q_10_8_0_2`,
      `NFT_MSG_NEWSETELEM ip ${TABLE} caps 10.8.0.2`,
    ]);
    expect(repairs).to.deep.equal([
      {
        address: '10.8.0.2',
        found: `table ip ${TABLE} missing with the cap of 10.8.0.2`,
        done: 'restored the cap of 1000000 bytes from the last seen state, 250000 used',
      },
    ]);
  });
});

describe('kernel/quota plan: the skeleton of an existing table', () => {
  it('sends nothing for an intact table whose caps all belong to live peers', () => {
    const state = intact([quota('10.8.0.2', KEY_A, 1000n), quota('10.8.0.3', KEY_B, 5000n, 5000n)]);
    expect(plan(state, [peer('10.8.0.2', KEY_A), peer('10.8.0.3', KEY_B)])).to.deep.equal({
      operations: [],
      repairs: [],
    });
  });

  it('makes a missing chain and its rule, leaving the other chain alone', () => {
    const state = { ...intact([]), chains: [null, TO], rules: [[], ourRules()[1]!] };
    expect(plan(state, []).operations).to.deep.equal([
      `NFT_MSG_NEWCHAIN ip ${TABLE} from_peers`,
      `NFT_MSG_NEWRULE ip ${TABLE} from_peers`,
    ]);
  });

  it('turns a drop policy back to accept without touching an intact rule', () => {
    const state = {
      ...intact([]),
      chains: [FROM, chain('to_peers', NF_INET_POST_ROUTING, NF_DROP)],
    };
    expect(plan(state, []).operations).to.deep.equal([`NFT_MSG_NEWCHAIN ip ${TABLE} to_peers`]);
  });

  it('flushes a chain holding a rule besides ours (or none) and appends our rule', () => {
    const foreign: RuleAttributes = { table: TABLE, chain: 'from_peers', expressions: [] };
    const state = { ...intact([]), rules: [[...ourRules()[0]!, foreign], []] };
    expect(plan(state, []).operations).to.deep.equal([
      `NFT_MSG_DELRULE ip ${TABLE} from_peers`,
      `NFT_MSG_NEWRULE ip ${TABLE} from_peers`,
      `NFT_MSG_NEWRULE ip ${TABLE} to_peers`,
    ]);
  });

  it('deletes and remakes a chain moved to another hook (the kernel cannot change a hook)', () => {
    const state = { ...intact([]), chains: [chain('from_peers', NF_INET_POST_ROUTING), TO] };
    expect(plan(state, []).operations).to.deep.equal([
      `NFT_MSG_DELCHAIN ip ${TABLE} from_peers`,
      `NFT_MSG_NEWCHAIN ip ${TABLE} from_peers`,
      `NFT_MSG_NEWRULE ip ${TABLE} from_peers`,
    ]);
  });

  it('replaces a map of another shape: rules out, map out, map in, then rules and elements again', () => {
    const objects = [quota('10.8.0.2', KEY_A, 1000n)];
    const state: CapTableState = {
      ...intact(objects),
      set: { table: TABLE, name: 'caps', flags: 0, keyLen: 4 },
      elements: null,
    };
    const { operations, repairs } = plan(state, [peer('10.8.0.2', KEY_A)]);
    expect(operations).to.deep.equal([
      `NFT_MSG_DELRULE ip ${TABLE} from_peers`,
      `NFT_MSG_DELRULE ip ${TABLE} to_peers`,
      `NFT_MSG_DELSET ip ${TABLE} caps`,
      `NFT_MSG_NEWSET ip ${TABLE} caps`,
      `NFT_MSG_NEWRULE ip ${TABLE} from_peers`,
      `NFT_MSG_NEWRULE ip ${TABLE} to_peers`,
      `NFT_MSG_NEWSETELEM ip ${TABLE} caps 1 element(s)`,
    ]);
    expect(repairs.map((r) => r.found)).to.deep.equal([
      'quota q_10_8_0_2 without its map element (not enforced)',
    ]);
  });
});

describe('kernel/quota plan: the caps of an existing table against the live peers', () => {
  it('removes the element, then the object, of an address no peer has', () => {
    const state = intact([quota('10.8.0.9', KEY_X, 1000n, 10n)]);
    const { operations, repairs } = plan(state, []);
    expect(operations).to.deep.equal([
      `NFT_MSG_DELSETELEM ip ${TABLE} caps 1 element(s)`,
      `NFT_MSG_DELOBJ ip ${TABLE} quota q_10_8_0_9`,
    ]);
    expect(repairs).to.deep.equal([
      {
        address: '10.8.0.9',
        found: 'quota q_10_8_0_9 (1000 bytes, 10 used) for an address no peer has',
        done: 'removed it and its map element',
      },
    ]);
  });

  it("replaces a cap owned by another key with the live peer's last seen one", () => {
    const state = intact([quota('10.8.0.2', KEY_X, 1000n, 700n)]);
    const seen = { quotaBytes: 2000, usedBytes: 30 };
    const { operations, repairs } = plan(state, [peer('10.8.0.2', KEY_A, seen)]);
    expect(operations).to.deep.equal([
      `NFT_MSG_DELSETELEM ip ${TABLE} caps 1 element(s)`,
      `NFT_MSG_DELOBJ ip ${TABLE} quota q_10_8_0_2`,
      `NFT_MSG_NEWOBJ ip ${TABLE} quota q_10_8_0_2`,
      `NFT_MSG_NEWSETELEM ip ${TABLE} caps 10.8.0.2`,
    ]);
    expect(repairs.map((r) => r.found)).to.deep.equal([
      "quota q_10_8_0_2 (1000 bytes, 700 used) owned by another public key than the peer's",
      'no quota object for 10.8.0.2, which had a cap of 2000 bytes',
    ]);
  });

  it('keeps an object without an owner comment (a kernel before 5.10 drops userdata)', () => {
    const state = intact([quota('10.8.0.2', null, 1000n)]);
    expect(plan(state, [peer('10.8.0.2', KEY_A)]).operations).to.deep.equal([]);
  });

  it('puts back a missing element of a kept cap and says the cap was not enforced', () => {
    const state = { ...intact([quota('10.8.0.2', KEY_A, 1000n)]), elements: [] };
    const { operations, repairs } = plan(state, [peer('10.8.0.2', KEY_A)]);
    expect(operations).to.deep.equal([`NFT_MSG_NEWSETELEM ip ${TABLE} caps 1 element(s)`]);
    expect(repairs).to.deep.equal([
      {
        address: '10.8.0.2',
        found: 'quota q_10_8_0_2 without its map element (not enforced)',
        done: 'added the element',
      },
    ]);
  });

  it('deletes an element leading nowhere or to the wrong object', () => {
    const state = {
      ...intact([quota('10.8.0.2', KEY_A, 1000n)]),
      elements: [element('10.8.0.2', 'q_10_8_0_2'), element('10.8.0.7', 'q_10_8_0_2')],
    };
    expect(plan(state, [peer('10.8.0.2', KEY_A)]).operations).to.deep.equal([
      `NFT_MSG_DELSETELEM ip ${TABLE} caps 1 element(s)`,
    ]);
  });

  it('leaves alone objects whose names are not ours', () => {
    const foreign = { ...quota('10.8.0.2', KEY_X, 1n), name: 'q_10_8_0_02' };
    expect(plan(intact([]), []).operations).to.deep.equal([]);
    expect(plan({ ...intact([]), objects: [foreign] }, []).operations).to.deep.equal([]);
  });

  it('restores the lost cap of a live peer from its last seen state', () => {
    const { operations, repairs } = plan(intact([]), [
      peer('10.8.0.2', KEY_A, { quotaBytes: 100, usedBytes: 20 }),
    ]);
    expect(operations).to.deep.equal([
      `NFT_MSG_NEWOBJ ip ${TABLE} quota q_10_8_0_2`,
      `NFT_MSG_NEWSETELEM ip ${TABLE} caps 10.8.0.2`,
    ]);
    expect(repairs[0]!.done).to.equal('restored it from the last seen state, 20 used');
  });

  it('without live peers (a retry inside setCap) keeps every cap and reports nothing', () => {
    const state = { ...intact([quota('10.8.0.9', KEY_X, 1000n)]), elements: [] };
    expect(plan(state, null)).to.deep.equal({
      operations: [`NFT_MSG_NEWSETELEM ip ${TABLE} caps 1 element(s)`],
      repairs: [],
    });
  });

  it('splits elements into messages of at most 512', () => {
    const objects = Array.from({ length: 600 }, (_, i) =>
      quota(`10.8.${Math.floor(i / 250)}.${(i % 250) + 1}`, KEY_A, 1000n),
    );
    const live = objects.map((o) => peer(o.name!.slice(2).replaceAll('_', '.'), KEY_A));
    expect(plan({ ...intact(objects), elements: [] }, live).operations).to.deep.equal([
      `NFT_MSG_NEWSETELEM ip ${TABLE} caps 512 element(s)`,
      `NFT_MSG_NEWSETELEM ip ${TABLE} caps 88 element(s)`,
    ]);
  });
});
