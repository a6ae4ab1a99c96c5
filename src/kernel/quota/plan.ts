/**
 * Reconciliation of the data-cap table as a plan: a pure function of what `ensure` read of the
 * kernel (CapTableState, or null for no table) and the live peers, giving the transaction to
 * commit and the repairs it makes. Nothing here sends or reads anything, so each rule can be
 * checked on literal inputs (test/unit/kernel/quota-plan.test.ts) as well as on the recorded
 * transcripts. The order of the messages is the kernel's: rules before the map they use, map
 * elements before the objects they point at.
 */
import { NftBatch, familyName } from '../nftables/client';
import type {
  ChainAttributes,
  ObjectAttributes,
  RuleAttributes,
  SetAttributes,
  SetElementAttributes,
} from '../nftables/client';
import { NFPROTO_INET, NFT_OBJECT_QUOTA, NF_ACCEPT } from '../nftables/constants';
import { sameExpressions } from '../nftables/expressions';
import { ipv4ToBytes } from '../ipv4';
import type { CapRef, Repair } from '../types';
import {
  CAPS_MAP,
  CAPS_MAP6,
  CAPS_MAP6_ID,
  CAPS_MAP_ID,
  type ChainSpec,
  QUOTA_FAMILY,
  chunks,
  addressOfObject,
  quotaTableName,
} from './naming';
import { elementTargets, parseQuota, writeNewQuota } from './objects';
import {
  type ThrottleState,
  type ThrottleTarget,
  planThrottle,
  throttleCaps6Targets,
  throttleTarget,
} from './throttle';
import {
  type MapIds,
  chainRules,
  chainSpecs,
  isChainAsSpecified,
  writeChain,
  writeRules,
  writeSetUp,
} from './skeleton';
import { capsMap, capsMap6, isCapsMap, isCapsMap6 } from './maps';
import { planElements6, writeElement6 } from './dual-stack';

/** What `ensure` reads of an existing data-cap table, all of it before writing anything. */
export interface CapTableState {
  set: SetAttributes | null;
  /** Per entry of chainSpecs(ifname), in that order: the chain, null when missing. */
  chains: Array<ChainAttributes | null>;
  /** Per entry of chainSpecs(ifname): the chain's rules in order (none for a missing chain). */
  rules: RuleAttributes[][];
  /** The table's quota objects. */
  objects: ObjectAttributes[];
  /** The map's elements; null when it was not read (no map, or one of another shape). */
  elements: SetElementAttributes[] | null;
  /** A dual-stack interface's map caps6 (./dual-stack.ts), null when missing. */
  set6?: SetAttributes | null;
  /** Its elements; null when not read. */
  elements6?: SetElementAttributes[] | null;
  /**
   * The throttle maps, chains, limits and elements (src/kernel/quota/throttle.ts); null when
   * they were not read because no cap throttles (a table without them stays without them).
   */
  throttle?: ThrottleState | null;
}

/** A transaction to commit and what it repairs. */
export interface CapTablePlan {
  batch: NftBatch;
  repairs: Repair[];
}

/**
 * The transaction that makes the table of `ifname` as specified and its caps agree with `live`.
 * `state` null: there is no table. `live` null: the skeleton only, every object kept as it is
 * (setCap's retry after the table or map vanished).
 */
export function planCapTable(
  ifname: string,
  state: CapTableState | null,
  live: readonly CapRef[] | null,
  dual = false,
): CapTablePlan {
  const batch = new NftBatch(dual ? NFPROTO_INET : QUOTA_FAMILY);
  const repairs: Repair[] = [];
  if (state === null) {
    planSetUp(batch, ifname, live ?? [], repairs, dual);
  } else {
    const ids = planSkeleton(batch, ifname, state, dual);
    planCaps(batch, ifname, state, ids, live, repairs, dual);
  }
  return { batch, repairs };
}

/** A dual-stack peer's IPv6 element beside a quota object written for it. */
function writeElementOf6(batch: NftBatch, table: string, peer: CapRef, setId?: number): void {
  if (peer.address6 != null)
    writeElement6(batch, table, { ...peer, address6: peer.address6 }, setId);
}

/**
 * No table: the whole set-up, and the live peers' caps restored from what the daemon last saw
 * (the table and every cap in it are gone; the kernel was the store of record).
 */
function planSetUp(
  batch: NftBatch,
  ifname: string,
  live: readonly CapRef[],
  repairs: Repair[],
  dual: boolean,
): void {
  const table = quotaTableName(ifname);
  writeSetUp(batch, ifname, dual);
  const throttles = new Map<string, ThrottleTarget>();
  for (const peer of live) {
    if (!peer.lastSeen) continue;
    const { quotaBytes, usedBytes, plan } = peer.lastSeen;
    const throttle = peer.lastSeen.throttleBytesPerSecond ?? null;
    writeNewQuota(batch, table, peer, BigInt(quotaBytes), BigInt(usedBytes), {
      plan: plan ?? null,
      throttleBytesPerSecond: throttle,
    });
    if (throttle !== null) throttles.set(peer.address, throttleTarget(peer, throttle));
    else if (dual) writeElementOf6(batch, table, peer, CAPS_MAP6_ID);
    repairs.push({
      address: peer.address,
      found: `table ${familyName(batch.family)} ${table} missing with the cap of ${peer.address}`,
      done:
        `restored the cap of ${quotaBytes} bytes from the last seen state, ${usedBytes} used` +
        (throttle === null ? '' : `, throttled to ${throttle} B/s over it`),
    });
  }
  if (throttles.size > 0) {
    const throttle = planThrottle(ifname, table, null, throttles, null, { dual });
    throttle.removals(batch); // the skeleton only: nothing exists to remove
    throttle.additions(batch);
  }
}

/**
 * The map, the chains and their rules. A map of another shape cannot be changed: the rules
 * that use it go, then it, then it is made anew with its rules. A chain on another hook,
 * priority or type is deleted and made again; one with another policy is updated; a chain whose
 * rules are not exactly our one rule is flushed and gets it. Returns the map's NFTA_SET_ID when
 * the batch creates the map (rules and elements then name it by id), else undefined.
 */
function planSkeleton(
  batch: NftBatch,
  ifname: string,
  state: CapTableState,
  dual: boolean,
): MapIds {
  const table = quotaTableName(ifname);
  const specs = chainSpecs(ifname);
  const flushed = new Set<string>();
  const set6 = state.set6 ?? null;
  const wrong6 = dual && set6 !== null && !isCapsMap6(set6);
  if ((state.set && !isCapsMap(state.set)) || wrong6) {
    specs.forEach((spec, index) => {
      if (state.chains[index] && state.rules[index]!.length > 0) {
        batch.deleteRules(table, spec.name);
        flushed.add(spec.name);
      }
    });
    if (state.set && !isCapsMap(state.set)) batch.deleteSet(table, CAPS_MAP);
    if (wrong6) batch.deleteSet(table, CAPS_MAP6);
  }
  const ids: MapIds = {};
  if (!state.set || !isCapsMap(state.set)) {
    batch.newSet(capsMap(table, CAPS_MAP_ID));
    ids.caps = CAPS_MAP_ID;
  }
  if (dual && (set6 === null || wrong6)) {
    batch.newSet(capsMap6(table, CAPS_MAP6_ID));
    ids.caps6 = CAPS_MAP6_ID;
  }
  specs.forEach((spec, index) => {
    const chain = state.chains[index] ?? null;
    const rules = state.rules[index] ?? [];
    if (planChain(batch, ifname, spec, chain, rules, ids, flushed.has(spec.name), dual)) {
      writeRules(batch, ifname, table, spec, dual, ids);
    }
  });
  return ids;
}

/** Queues what one chain needs; true when it then needs its rule. */
function planChain(
  batch: NftBatch,
  ifname: string,
  spec: ChainSpec,
  chain: ChainAttributes | null,
  rules: RuleAttributes[],
  ids: MapIds,
  flushed: boolean,
  dual: boolean,
): boolean {
  const table = quotaTableName(ifname);
  if (!chain || !isChainAsSpecified(chain, spec)) {
    if (chain) batch.deleteChain(table, spec.name); // hook, priority or type cannot be changed
    writeChain(batch, table, spec);
    return true;
  }
  if (chain.policy !== NF_ACCEPT) writeChain(batch, table, spec); // updates the policy
  const wanted = chainRules(ifname, spec, dual);
  const intact =
    ids.caps === undefined &&
    ids.caps6 === undefined &&
    rules.length === wanted.length &&
    wanted.every((expressions, i) => sameExpressions(rules[i]!.expressions ?? [], expressions));
  if (intact) return false;
  if (rules.length > 0 && !flushed) batch.deleteRules(table, spec.name);
  return true;
}

/**
 * Objects and elements. An object is kept for a live peer that owns it and removed for anybody
 * else; a live peer's lost object is restored from what the daemon last saw. Every kept object
 * is reachable through the map under its address, and nothing else is.
 */
function planCaps(
  batch: NftBatch,
  ifname: string,
  state: CapTableState,
  ids: MapIds,
  live: readonly CapRef[] | null,
  repairs: Repair[],
  dual: boolean,
): void {
  const table = quotaTableName(ifname);
  const { wanted, throttles, doomed, restored } = capTargets(table, state, live, repairs, dual);
  const throttle =
    throttles.size > 0 || state.throttle
      ? planThrottle(
          ifname,
          table,
          state.throttle ?? null,
          throttles,
          live === null ? null : repairs,
          {
            dual,
          },
        )
      : null;
  const present = elementTargets(state.elements ?? []);
  const stale = [...present].filter(([address, objref]) => wanted.get(address) !== objref);
  const missing = [...wanted].filter(([address, name]) => present.get(address) !== name);
  if (live !== null) {
    for (const [address, name] of missing) {
      repairs.push({
        address,
        found: `quota ${name} without its map element (not enforced)`,
        done: 'added the element',
      });
    }
  }
  writeCapsElements(batch, table, ids.caps, stale, missing);
  if (dual && live !== null) {
    // caps6 follows the kept objects; its elements of doomed objects go before them too.
    const present6 = ids.caps6 === undefined ? (state.elements6 ?? []) : [];
    repairs.push(...planElements6(batch, table, wanted, live, present6, ids.caps6));
  }
  throttle?.removals(batch);
  // After their elements: the kernel refuses to delete an object a map element refers to.
  for (const name of doomed) batch.deleteObject(table, NFT_OBJECT_QUOTA, name, 'quota');
  repairs.push(...writeRestored(batch, table, restored, dual, ids.caps6));
  throttle?.additions(batch);
}

/**
 * planCaps's first step, pure but for the repairs of doomed objects: the objects sorted
 * (sortObjects), the live peers whose object is lost and comes back from their last seen state,
 * the throttled caps (a restored one's too, with a dual-stack peer's IPv6 address), and the caps
 * map's wanted elements: address → object, a throttled cap's never (they are in the throttle maps).
 */
function capTargets(
  table: string,
  state: CapTableState,
  live: readonly CapRef[] | null,
  repairs: Repair[],
  dual: boolean,
): {
  wanted: Map<string, string>;
  throttles: Map<string, ThrottleTarget>;
  doomed: string[];
  restored: CapRef[];
} {
  const { wanted: kept, throttles, doomed } = sortObjects(table, state.objects, live, repairs);
  const restored = (live ?? []).filter((peer) => peer.lastSeen && !kept.has(peer.address));
  for (const peer of restored) {
    const throttle = peer.lastSeen!.throttleBytesPerSecond ?? null;
    if (throttle !== null) throttles.set(peer.address, throttleTarget(peer, throttle));
  }
  addresses6Of(throttles, live, state.throttle ?? null, dual);
  const wanted = new Map([...kept].filter(([address]) => !throttles.has(address)));
  return { wanted, throttles, doomed, restored };
}

/** The caps map's element changes: the stale ones out, then the missing ones in, in chunks. */
function writeCapsElements(
  batch: NftBatch,
  table: string,
  setId: number | undefined,
  stale: ReadonlyArray<readonly [string, string | undefined]>,
  missing: ReadonlyArray<readonly [string, string]>,
): void {
  for (const chunk of chunks(stale)) {
    batch.deleteSetElements(
      { table, set: CAPS_MAP, elements: chunk.map(([a]) => ({ key: { value: ipv4ToBytes(a) } })) },
      `${chunk.length} element(s)`,
    );
  }
  for (const chunk of chunks(missing)) {
    batch.newSetElements(
      {
        table,
        set: CAPS_MAP,
        setId,
        elements: chunk.map(([a, name]) => ({ key: { value: ipv4ToBytes(a) }, objref: name })),
      },
      `${chunk.length} element(s)`,
    );
  }
}

/**
 * The quota objects of live peers the kernel lost, made again from their last seen state (with
 * a dual-stack peer's caps6 element unless the cap throttles); one repair each.
 */
function writeRestored(
  batch: NftBatch,
  table: string,
  restored: readonly CapRef[],
  dual: boolean,
  caps6?: number,
): Repair[] {
  return restored.map((peer) => {
    const seen = peer.lastSeen!;
    const rate = seen.throttleBytesPerSecond ?? null;
    writeNewQuota(batch, table, peer, BigInt(seen.quotaBytes), BigInt(seen.usedBytes), {
      plan: seen.plan ?? null,
      throttleBytesPerSecond: rate,
    });
    if (dual && rate === null) writeElementOf6(batch, table, peer, caps6);
    return {
      address: peer.address,
      found: `no quota object for ${peer.address}, which had a cap of ${seen.quotaBytes} bytes`,
      done: `restored it from the last seen state, ${seen.usedBytes} used`,
    };
  });
}

/**
 * The IPv6 address of each throttled cap of a dual-stack table: the live peer's, or, where the
 * live peers are not given (the skeleton only), the one its throttle_caps6 element has now.
 */
function addresses6Of(
  throttles: Map<string, ThrottleTarget>,
  live: readonly CapRef[] | null,
  state: ThrottleState | null,
  dual: boolean,
): void {
  if (!dual) return;
  if (live !== null) {
    for (const peer of live) {
      const target = throttles.get(peer.address);
      if (target && peer.address6 != null) target.address6 = peer.address6;
    }
    return;
  }
  for (const [address6, quota] of throttleCaps6Targets(state)) {
    const address = quota === undefined ? null : addressOfObject(quota);
    const target = address === null ? undefined : throttles.get(address);
    if (target) target.address6 = address6;
  }
}

/**
 * The table's quota objects sorted into kept (address → name; the throttling ones also in
 * `throttles`) and doomed (names), each doomed one reported. Objects not named by
 * quotaObjectName are somebody else's and left alone. With `live` null every object of ours is
 * kept.
 */
function sortObjects(
  table: string,
  objects: readonly ObjectAttributes[],
  live: readonly CapRef[] | null,
  repairs: Repair[],
): { wanted: Map<string, string>; throttles: Map<string, ThrottleTarget>; doomed: string[] } {
  const peers = live === null ? null : new Map(live.map((peer) => [peer.address, peer]));
  const wanted = new Map<string, string>();
  const throttles = new Map<string, ThrottleTarget>();
  const doomed: string[] = [];
  for (const object of objects) {
    if (object.table !== table || object.type !== NFT_OBJECT_QUOTA || !object.name) continue;
    const address = addressOfObject(object.name);
    if (!address) continue;
    const peer = peers?.get(address);
    const quota = parseQuota(object);
    const owner = quota?.owner ?? null;
    if (peers !== null && (!peer || (owner !== null && owner !== peer.publicKey))) {
      const held = quota
        ? `quota ${object.name} (${quota.quotaBytes} bytes, ${quota.usedBytes} used)`
        : `object ${object.name}`;
      doomed.push(object.name);
      repairs.push({
        address,
        found: peer
          ? `${held} owned by another public key than the peer's`
          : `${held} for an address no peer has`,
        done: 'removed it and its map element',
      });
      continue;
    }
    wanted.set(address, object.name);
    const rate = quota?.throttleBytesPerSecond ?? null;
    if (rate !== null) throttles.set(address, { quota: object.name, bytesPerSecond: rate });
  }
  return { wanted, throttles, doomed };
}
