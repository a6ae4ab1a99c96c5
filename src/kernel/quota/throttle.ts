/**
 * Throttling after the cap (afterCap "throttle"): from the packet that uses a cap up until the
 * next reset or a raise, the peer passes at most `throttleBytesPerSecond` in each direction,
 * decided per packet in the kernel, whether or not the daemon runs.
 *
 * What it adds to the table of the caps (src/kernel/quota/index.ts), only once a peer is
 * throttled (a table without throttled caps is exactly as before):
 *
 *   map throttle_caps { type ipv4_addr : quota; elements = { 10.8.0.2 : "q_10_8_0_2" } }
 *   map throttle_up   { type ipv4_addr : limit; elements = { 10.8.0.2 : "tu_10_8_0_2" } }
 *   map throttle_down { type ipv4_addr : limit; elements = { 10.8.0.2 : "td_10_8_0_2" } }
 *   limit tu_10_8_0_2 { rate over 5000 bytes/second burst 65536 bytes }
 *   chain throttle_from_peers {
 *     type filter hook prerouting priority filter; policy accept;
 *     iifname "wg0" quota name ip saddr map @throttle_caps limit name ip saddr map @throttle_up drop
 *   }
 *   chain throttle_to_peers { ... postrouting, oifname, ip daddr, @throttle_down ... }
 *
 * - A throttled peer's quota object is the same object as a blocked one's (same name, same
 *   count, both directions), reached through `throttle_caps` instead of `caps`: a peer's address
 *   is in exactly one of the two maps, so each packet is counted once and the block rule never
 *   sees a throttled peer. The quota is `over` (NFT_QUOTA_F_INV): while under the cap the rule
 *   ends there (NFT_BREAK) and the limit is not even evaluated.
 * - Over the cap the rule goes on to a per-peer, per-direction limit object (NFT_OBJECT_LIMIT,
 *   type NFT_LIMIT_PKT_BYTES, flag NFT_LIMIT_F_INV = `over`): a token bucket in bytes that
 *   lets a packet pass while it has tokens and matches (then: drop) when it has none. A policer,
 *   not a queue: O(1) per packet (two hash lookups), nothing to schedule, and it works the same
 *   on both hooks. Why not HTB as for speed limits: upload is shaped on the IFB after the tc
 *   ingress redirect, which runs before netfilter's prerouting, so nft cannot steer an upload
 *   packet into an HTB class; only download could (meta priority before the device's qdisc).
 *   One mechanism for both directions that needs no daemon is the policer.
 * - The bucket (net/netfilter/nft_limit.c, nft_limit_init for bytes): tokens_max =
 *   unit * (rate + burst) / rate nanoseconds, i.e. one second of the rate plus `burst` bytes,
 *   and a packet costs its length. A packet that costs more than the whole bucket never passes,
 *   and GSO/GRO hands these hooks packets of up to 64 KiB, so burst is 64 KiB: at 1,000 B/s a
 *   64 KiB packet still fits. The bucket is full when the cap runs out (it filled while unused),
 *   so the first second after the cap may pass up to one second of the rate plus the burst;
 *   after that TCP through it holds the rate (measured: test/kernel/throttle.test.ts).
 * - A limit object cannot be changed in place: nft_limit's object type has no `update` hook
 *   (6.1 and 6.12), and nf_tables_newobj acknowledges a NEWOBJ on an existing object without an
 *   update hook and changes nothing. A new rate therefore replaces the objects in one
 *   transaction: elements out, objects out, objects in, elements in.
 * - A dual-stack interface's table (family inet, ./dual-stack.ts) has the same three maps for
 *   IPv6 addresses too (throttle_caps6, throttle_up6, throttle_down6) and each throttle chain a
 *   rule per family (`meta nfproto` first, as there): a peer's IPv6 address leads to the same
 *   quota and the same two limits as its IPv4 one, so one rate holds for both families together,
 *   as one cap counts them together.
 * - The mode and the rate are the cap's record (src/kernel/quota/record.ts) in the quota
 *   object's userdata; the limit objects and map elements are derived from it, and `ensure`
 *   puts them back from it when they are lost.
 */
import { encodeAttributes, decodeAttributes } from '../../netlink';
import type {
  ChainAttributes,
  NftBatch,
  ObjectAttributes,
  RuleAttributes,
  SetAttributes,
  SetElementAttributes,
} from '../nftables/client';
import {
  IFNAMSIZ,
  NFPROTO_IPV4,
  NFPROTO_IPV6,
  NFTNL_UDATA_SET_KEYBYTEORDER,
  NFT_BYTEORDER_BIG_ENDIAN,
  NFT_DATATYPE_IP6ADDR,
  NFT_DATATYPE_IPADDR,
  NFT_LIMIT_F_INV,
  NFT_LIMIT_PKT_BYTES,
  NFT_META_IIFNAME,
  NFT_META_NFPROTO,
  NFT_META_OIFNAME,
  NFT_OBJECT_LIMIT,
  NFT_OBJECT_QUOTA,
  NFT_PAYLOAD_NETWORK_HEADER,
  NFT_REG_1,
  NFT_SET_OBJECT,
  NF_ACCEPT,
  NF_DROP,
  NF_INET_POST_ROUTING,
  NF_INET_PRE_ROUTING,
} from '../nftables/constants';
import {
  type Expression,
  cmpEq,
  metaLoad,
  objrefMap,
  payloadLoad,
  sameExpressions,
  verdict,
} from '../nftables/expressions';
import { limitAttributes } from '../nftables/schema';
import { commentUserdata, encodeUserdata, u32Tlv } from '../nftables/userdata';
import { bytesToIpv4, ipv4ToBytes } from '../ipv4';
import { bytesToIpv6, ipv6ToBytes } from '../ipv6';
import type { Repair } from '../types';
import { IPV6_DADDR_OFFSET, IPV6_SADDR_OFFSET } from './dual-stack';
import {
  type ChainSpec,
  IPV4_DADDR_OFFSET,
  IPV4_SADDR_OFFSET,
  THROTTLE_CAPS_MAP,
  limitObjectName,
  quotaObjectName,
} from './naming';
import { isChainAsSpecified, peerAddressMatch, writeChain } from './skeleton';

/** Burst of every throttle limit: the largest GSO/GRO packet (see the header). */
export const THROTTLE_BURST_BYTES = 65_536;
/** NFTA_LIMIT_UNIT: the rate is per second. */
const PER_SECOND = 1n;

type Direction = 'up' | 'down';
type Role = 'quota' | Direction;

interface MapSpec {
  name: string;
  /** NFTA_SET_ID when a batch creates it (caps has 1, caps6 2). */
  id: number;
  family: 4 | 6;
  /** What its elements lead to: the quota, or the limit of one direction. */
  role: Role;
}

const MAPS4: readonly MapSpec[] = [
  { name: THROTTLE_CAPS_MAP, id: 3, family: 4, role: 'quota' },
  { name: 'throttle_up', id: 4, family: 4, role: 'up' },
  { name: 'throttle_down', id: 5, family: 4, role: 'down' },
];
const MAPS6: readonly MapSpec[] = [
  { name: 'throttle_caps6', id: 6, family: 6, role: 'quota' },
  { name: 'throttle_up6', id: 7, family: 6, role: 'up' },
  { name: 'throttle_down6', id: 8, family: 6, role: 'down' },
];

/** The maps of an ip table, or of a dual-stack interface's inet table, in ThrottleState order. */
export function throttleMaps(dual: boolean): readonly MapSpec[] {
  return dual ? [...MAPS4, ...MAPS6] : MAPS4;
}

export interface ThrottleChainSpec extends ChainSpec {
  direction: Direction;
}

export function throttleChainSpecs(ifname: string): ThrottleChainSpec[] {
  return [
    {
      name: 'throttle_from_peers',
      hooknum: NF_INET_PRE_ROUTING,
      metaKey: NFT_META_IIFNAME,
      addressOffset: IPV4_SADDR_OFFSET,
      comment: `wg-peerd: throttle uploads of peers of ${ifname} over their cap`,
      direction: 'up',
    },
    {
      name: 'throttle_to_peers',
      hooknum: NF_INET_POST_ROUTING,
      metaKey: NFT_META_OIFNAME,
      addressOffset: IPV4_DADDR_OFFSET,
      comment: `wg-peerd: throttle downloads to peers of ${ifname} over their cap`,
      direction: 'down',
    },
  ];
}

/**
 * The rules of one throttle chain: i/oifname, (in an inet table: meta nfproto,) the address →
 * quota over the cap → limit over the rate → drop; one rule, or one per family. `made`: the
 * maps this batch creates, which the rules name by id.
 */
export function throttleRules(
  ifname: string,
  spec: ThrottleChainSpec,
  dual: boolean,
  made: ReadonlySet<string> = new Set(),
): Expression[][] {
  const maps = throttleMaps(dual);
  const rule = (family: 4 | 6): Expression[] => {
    const quota = maps.find((m) => m.family === family && m.role === 'quota')!;
    const limits = maps.find((m) => m.family === family && m.role === spec.direction)!;
    const id = (map: MapSpec): number | undefined => (made.has(map.name) ? map.id : undefined);
    return [
      ...(dual ? familyMatch(ifname, spec, family) : peerAddressMatch(ifname, spec)),
      objrefMap(NFT_REG_1, quota.name, id(quota)),
      objrefMap(NFT_REG_1, limits.name, id(limits)),
      verdict(NF_DROP),
    ];
  };
  return dual ? [rule(4), rule(6)] : [rule(4)];
}

/** In an inet table: i/oifname, meta nfproto == family, then that family's peer address. */
function familyMatch(ifname: string, spec: ThrottleChainSpec, family: 4 | 6): Expression[] {
  const name = Buffer.alloc(IFNAMSIZ); // NUL-padded, as the kernel stores interface names
  name.write(ifname, 'utf8');
  const offset6 = spec.direction === 'up' ? IPV6_SADDR_OFFSET : IPV6_DADDR_OFFSET;
  return [
    metaLoad(spec.metaKey, NFT_REG_1),
    cmpEq(NFT_REG_1, name),
    metaLoad(NFT_META_NFPROTO, NFT_REG_1),
    cmpEq(NFT_REG_1, Buffer.from([family === 4 ? NFPROTO_IPV4 : NFPROTO_IPV6])),
    family === 4
      ? payloadLoad(NFT_PAYLOAD_NETWORK_HEADER, spec.addressOffset, 4, NFT_REG_1)
      : payloadLoad(NFT_PAYLOAD_NETWORK_HEADER, offset6, 16, NFT_REG_1),
  ];
}

function mapAttributes(table: string, map: MapSpec): SetAttributes {
  return {
    table,
    name: map.name,
    flags: NFT_SET_OBJECT,
    keyType: map.family === 4 ? NFT_DATATYPE_IPADDR : NFT_DATATYPE_IP6ADDR,
    keyLen: map.family === 4 ? 4 : 16,
    objType: map.role === 'quota' ? NFT_OBJECT_QUOTA : NFT_OBJECT_LIMIT,
    id: map.id,
    // What nft stores for an ipv4_addr or ipv6_addr key, so that `nft list` prints addresses.
    userdata: encodeUserdata([u32Tlv(NFTNL_UDATA_SET_KEYBYTEORDER, NFT_BYTEORDER_BIG_ENDIAN)]),
  };
}

function isMapAsSpecified(set: SetAttributes, map: MapSpec): boolean {
  const wanted = mapAttributes(set.table ?? '', map);
  return (
    set.flags === wanted.flags && set.keyLen === wanted.keyLen && set.objType === wanted.objType
  );
}

/** The data of a throttle limit object: `rate over <rate> bytes/second burst 65536 bytes`. */
export function limitData(bytesPerSecond: number): Buffer {
  return encodeAttributes(limitAttributes, {
    rate: BigInt(bytesPerSecond),
    unit: PER_SECOND,
    burst: THROTTLE_BURST_BYTES,
    type: NFT_LIMIT_PKT_BYTES,
    flags: NFT_LIMIT_F_INV,
  });
}

/** The rate of a limit object written by limitData; null for anything else. */
export function limitRate(object: ObjectAttributes): number | null {
  if (object.type !== NFT_OBJECT_LIMIT || !object.data) return null;
  const data = decodeAttributes(limitAttributes, object.data, `limit ${object.name ?? ''}`);
  const ours =
    data.unit === PER_SECOND &&
    data.burst === THROTTLE_BURST_BYTES &&
    data.type === NFT_LIMIT_PKT_BYTES &&
    data.flags === NFT_LIMIT_F_INV;
  return ours && data.rate !== undefined ? Number(data.rate) : null;
}

const LIMIT_NAME = /^t([ud])_(\d{1,3})_(\d{1,3})_(\d{1,3})_(\d{1,3})$/;

/** The address a limit object name stands for, or null for a name that is not ours. */
export function addressOfLimit(name: string): string | null {
  const match = LIMIT_NAME.exec(name);
  if (!match) return null;
  const address = match.slice(2).join('.');
  const direction = match[1] === 'u' ? 'up' : 'down';
  try {
    return limitObjectName(address, direction) === name ? address : null;
  } catch {
    return null;
  }
}

/** What the throttle part of a table holds, read before anything is written. */
export interface ThrottleState {
  /** Per map of throttleMaps(dual): the set, null when missing. */
  sets: Array<SetAttributes | null>;
  /** Per entry of throttleChainSpecs. */
  chains: Array<ChainAttributes | null>;
  rules: RuleAttributes[][];
  /** The table's limit objects. */
  limits: ObjectAttributes[];
  /** Per map: its elements (empty when it is missing). */
  elements: SetElementAttributes[][];
}

/** A throttled cap: its quota object and rate, and a dual-stack peer's IPv6 address. */
export interface ThrottleTarget {
  quota: string;
  bytesPerSecond: number;
  address6?: string | null;
}

/**
 * Plans the throttle part of the table for `wanted` (IPv4 address → target): the maps and chains
 * as specified, the limit objects at their rates, the elements. Returns two steps, because of the
 * kernel's order: `removals` (chains and maps to make, elements out, then limit objects; before
 * any quota object is deleted) and `additions` (limit objects, then elements; after every quota
 * object is made). `state` null: nothing of it exists yet. `replaced`: addresses whose quota
 * object this batch deletes and makes again, so its throttle_caps elements go and come back.
 * The difference is computed (and the repairs reported) now, once; the steps only write it.
 */
export function planThrottle(
  ifname: string,
  table: string,
  state: ThrottleState | null,
  wanted: ReadonlyMap<string, ThrottleTarget>,
  repairs: Repair[] | null,
  options: { dual?: boolean; replaced?: readonly string[] } = {},
): { removals(batch: NftBatch): void; additions(batch: NftBatch): void } {
  const dual = options.dual ?? false;
  const diff = diffThrottle(ifname, table, state, wanted, dual, options.replaced ?? []);
  if (repairs && state) repairs.push(...throttleRepairs(wanted, diff.missing));
  const target: ThrottleWrite = { ifname, table, state, dual, maps: throttleMaps(dual) };
  return {
    removals: (batch) => writeThrottleRemovals(batch, target, diff),
    additions: (batch) => writeThrottleAdditions(batch, target, diff),
  };
}

/** An element of a throttle map: its key (IPv4 or IPv6 address), the object it leads to. */
type Element<Objref = string> = readonly [key: string, objref: Objref];

/** The throttle part of a table: what was read against what is wanted, before any write. */
interface ThrottleDiff {
  /** The maps this batch makes anew (missing, or of another shape), by name. */
  made: ReadonlySet<string>;
  /** Per throttle chain: what it needs. */
  actions: readonly ChainAction[];
  /** Per map: elements that go (leading elsewhere than wanted, or to an object replaced). */
  stale: ReadonlyArray<ReadonlyArray<Element<string | undefined>>>;
  /** Per map: elements that come (missing, leading elsewhere, or to an object replaced). */
  missing: ReadonlyArray<readonly Element[]>;
  /** Limit objects that go: not wanted, or at another rate (a limit is not changed in place). */
  doomedLimits: readonly string[];
  /** Limit objects that come, with their rate in bytes per second. */
  missingLimits: ReadonlyArray<readonly [name: string, rate: number]>;
}

/** Where a ThrottleDiff is written: the table, what was read of it, its maps. */
interface ThrottleWrite {
  ifname: string;
  table: string;
  state: ThrottleState | null;
  dual: boolean;
  maps: readonly MapSpec[];
}

/**
 * planThrottle's first step, pure: the maps to make, each chain's need, the elements and limit
 * objects that go and come. An element or limit that is right stays untouched.
 */
function diffThrottle(
  ifname: string,
  table: string,
  state: ThrottleState | null,
  wanted: ReadonlyMap<string, ThrottleTarget>,
  dual: boolean,
  replaced: readonly string[],
): ThrottleDiff {
  const maps = throttleMaps(dual);
  const made = mapsToMake(maps, state);
  const present = maps.map((map, i) =>
    made.has(map.name) ? new Map<string, string | undefined>() : targets(state?.elements[i] ?? []),
  );
  const rates = limitRates(table, state);
  const desired = desiredThrottle(maps, wanted);
  const renewedKeys = renewedKeysOf(replaced, wanted);
  const doomedLimits = [...rates]
    .filter(([name, rate]) => desired.limits.get(name) !== rate)
    .map(([name]) => name);
  const doomed = new Set(doomedLimits);
  // A quota object replaced in this batch: its elements must go before it and come back after.
  const renewed = (i: number, key: string): boolean =>
    maps[i]!.role === 'quota' && renewedKeys.has(key);
  const gone = (i: number, key: string, name: string | undefined): boolean =>
    doomed.has(name ?? '') || renewed(i, key);
  const actions = throttleChainSpecs(ifname).map((spec, i) =>
    chainAction(ifname, spec, state?.chains[i] ?? null, state?.rules[i] ?? [], dual, made),
  );
  return {
    made,
    actions,
    stale: present.map((elements, i) =>
      [...elements].filter(
        ([key, name]) => desired.elements[i]!.get(key) !== name || gone(i, key, name),
      ),
    ),
    missing: desired.elements.map((elements, i) =>
      [...elements].filter(([key, name]) => present[i]!.get(key) !== name || gone(i, key, name)),
    ),
    doomedLimits,
    missingLimits: [...desired.limits].filter(([name]) => !rates.has(name) || doomed.has(name)),
  };
}

/** The maps a batch makes anew: missing from `state`, or of another shape (not changeable). */
function mapsToMake(maps: readonly MapSpec[], state: ThrottleState | null): Set<string> {
  return new Set(
    maps
      .filter((map, i) => {
        const set = state?.sets[i] ?? null;
        return !set || !isMapAsSpecified(set, map);
      })
      .map((map) => map.name),
  );
}

/** The table's limit objects named as ours: name → rate (null when not a limit of ours). */
function limitRates(table: string, state: ThrottleState | null): Map<string, number | null> {
  const rates = new Map<string, number | null>();
  for (const object of state?.limits ?? []) {
    if (object.table === table && object.name && addressOfLimit(object.name)) {
      rates.set(object.name, limitRate(object));
    }
  }
  return rates;
}

/**
 * What `wanted` asks of the maps and limits: per map, key (IPv4 or IPv6 address) → the object
 * its element must name; and limit object name → rate.
 */
function desiredThrottle(
  maps: readonly MapSpec[],
  wanted: ReadonlyMap<string, ThrottleTarget>,
): { elements: Array<Map<string, string>>; limits: Map<string, number> } {
  const elements = maps.map(() => new Map<string, string>());
  const limits = new Map<string, number>();
  for (const [address, target] of wanted) {
    const names: Record<Role, string> = {
      quota: target.quota,
      up: limitObjectName(address, 'up'),
      down: limitObjectName(address, 'down'),
    };
    maps.forEach((map, i) => {
      const key = map.family === 4 ? address : target.address6;
      if (key != null) elements[i]!.set(key, names[map.role]);
    });
    limits.set(names.up, target.bytesPerSecond);
    limits.set(names.down, target.bytesPerSecond);
  }
  return { elements, limits };
}

/** The keys (IPv4 and IPv6) of the addresses whose quota object the batch replaces. */
function renewedKeysOf(
  replaced: readonly string[],
  wanted: ReadonlyMap<string, ThrottleTarget>,
): Set<string> {
  const keys = new Set<string>();
  for (const address of replaced) {
    keys.add(address);
    const address6 = wanted.get(address)?.address6;
    if (address6 != null) keys.add(address6);
  }
  return keys;
}

/** One repair per wanted throttle with an element to put back, in the order of `wanted`. */
function throttleRepairs(
  wanted: ReadonlyMap<string, ThrottleTarget>,
  missing: ThrottleDiff['missing'],
): Repair[] {
  return [...wanted]
    .filter(([address, target]) => {
      const keys = [address, target.address6];
      return missing.some((list) => list.some(([key]) => keys.includes(key)));
    })
    .map(([address, target]) => ({
      address,
      found: `the throttle of ${address} (${target.bytesPerSecond} B/s over the cap) incomplete`,
      done: 'put back its limits and map elements',
    }));
}

function keyBytes(map: MapSpec, key: string): Buffer {
  return map.family === 4 ? ipv4ToBytes(key) : ipv6ToBytes(key);
}

/**
 * The first step: rules that use a map before it (a chain on the wrong hook goes whole), maps
 * made anew, chains and rules, then the stale elements and the doomed limits.
 */
function writeThrottleRemovals(batch: NftBatch, to: ThrottleWrite, diff: ThrottleDiff): void {
  const { ifname, table, state, dual, maps } = to;
  const specs = throttleChainSpecs(ifname);
  specs.forEach((spec, i) => {
    if (diff.actions[i] === 'chain' && state?.chains[i]) batch.deleteChain(table, spec.name);
    if (diff.actions[i] === 'rule' && (state?.rules[i]?.length ?? 0) > 0) {
      batch.deleteRules(table, spec.name);
    }
  });
  maps.forEach((map, i) => {
    if (!diff.made.has(map.name)) return;
    if (state?.sets[i]) batch.deleteSet(table, map.name);
    batch.newSet(mapAttributes(table, map));
  });
  specs.forEach((spec, i) => {
    const action = diff.actions[i];
    if (action === 'chain' || action === 'policy') writeChain(batch, table, spec);
    if (action !== 'chain' && action !== 'rule') return;
    for (const expressions of throttleRules(ifname, spec, dual, diff.made)) {
      batch.newRule({
        table,
        chain: spec.name,
        expressions,
        userdata: commentUserdata(spec.comment),
      });
    }
  });
  maps.forEach((map, i) => {
    const stale = diff.stale[i]!;
    if (diff.made.has(map.name) || stale.length === 0) return;
    batch.deleteSetElements(
      {
        table,
        set: map.name,
        elements: stale.map(([key]) => ({ key: { value: keyBytes(map, key) } })),
      },
      `${stale.length} element(s)`,
    );
  });
  for (const name of diff.doomedLimits) batch.deleteObject(table, NFT_OBJECT_LIMIT, name, 'limit');
}

/** The second step: the limit objects, then the elements that lead to them. */
function writeThrottleAdditions(batch: NftBatch, to: ThrottleWrite, diff: ThrottleDiff): void {
  const { table, maps } = to;
  for (const [name, rate] of diff.missingLimits) {
    batch.newObject({ table, name, type: NFT_OBJECT_LIMIT, data: limitData(rate) }, 'limit');
  }
  maps.forEach((map, i) => {
    const missing = diff.missing[i]!;
    if (missing.length === 0) return;
    batch.newSetElements(
      {
        table,
        set: map.name,
        setId: diff.made.has(map.name) ? map.id : undefined,
        elements: missing.map(([key, objref]) => ({ key: { value: keyBytes(map, key) }, objref })),
      },
      `${missing.length} element(s)`,
    );
  });
}

type ChainAction = 'keep' | 'policy' | 'rule' | 'chain';

/**
 * What one throttle chain needs: nothing; its policy; its rules put back (not exactly ours, or
 * a map they use is made anew in this batch and they must name it); or the chain made (missing,
 * or on another hook, priority or type, which cannot be changed).
 */
function chainAction(
  ifname: string,
  spec: ThrottleChainSpec,
  chain: ChainAttributes | null,
  rules: readonly RuleAttributes[],
  dual: boolean,
  made: ReadonlySet<string>,
): ChainAction {
  if (!chain || !isChainAsSpecified(chain, spec)) return 'chain';
  const wanted = throttleRules(ifname, spec, dual);
  const intact =
    made.size === 0 &&
    rules.length === wanted.length &&
    wanted.every((expressions, i) => sameExpressions(rules[i]!.expressions ?? [], expressions));
  if (!intact) return 'rule';
  return chain.policy === NF_ACCEPT ? 'keep' : 'policy';
}

function targets(elements: readonly SetElementAttributes[]): Map<string, string | undefined> {
  const out = new Map<string, string | undefined>();
  for (const element of elements) {
    const key = element.key?.value;
    if (key?.length === 4) out.set(bytesToIpv4(key), element.objref);
    else if (key?.length === 16) out.set(bytesToIpv6(key), element.objref);
  }
  return out;
}

/** The target of a peer's throttled cap. */
export function throttleTarget(
  peer: { address: string; address6?: string | null },
  bytesPerSecond: number,
): ThrottleTarget {
  return { quota: quotaObjectName(peer.address), bytesPerSecond, address6: peer.address6 ?? null };
}

/** A dual-stack table's throttle_caps6 now: IPv6 address → quota object name. */
export function throttleCaps6Targets(state: ThrottleState | null): Map<string, string | undefined> {
  const index = throttleMaps(true).findIndex((map) => map.family === 6 && map.role === 'quota');
  return targets(state?.elements[index] ?? []);
}
