/**
 * The u32 classifier: handles, the selector struct with its trailing keys, and the attribute
 * table of a u32 filter (a hash table or a key node).
 *
 * Sources: /usr/include/linux/pkt_cls.h (TCA_U32_*, struct tc_u32_sel, struct tc_u32_key,
 * TC_U32_* handle macros and flags). Behaviour referred to below is net/sched/cls_u32.c.
 */
import {
  type Codec,
  NetlinkProtocolError,
  list,
  nested,
  schema,
  string,
  struct,
  u32,
} from '../../netlink';
import { type MirredAction, actionEntry } from './mirred';
import { TCA_KIND, TCA_OPTIONS } from './tc';

// enum TCA_U32_* (pkt_cls.h)
export const TCA_U32_CLASSID = 1;
export const TCA_U32_HASH = 2;
export const TCA_U32_LINK = 3;
export const TCA_U32_DIVISOR = 4;
export const TCA_U32_SEL = 5;
export const TCA_U32_ACT = 7;
export const TCA_U32_FLAGS = 11;

// tc_u32_sel.flags (pkt_cls.h)
/** A match ends the search: the classid (and actions) apply. Links never carry it. */
export const TC_U32_TERMINAL = 1;

/** Most buckets a u32 hash table may have (cls_u32.c: "Exceeded maximum 256 hash buckets"). */
export const U32_MAX_DIVISOR = 256;

/** htid(12 bits):bucket(8 bits):node(12 bits), what tc prints as "800:0:1". */
export function u32Handle(table: number, bucket: number, node: number): number {
  return (((table & 0xfff) << 20) | ((bucket & 0xff) << 12) | (node & 0xfff)) >>> 0;
}

/** TC_U32_USERHTID: the table id, "800" of "800:0:1". */
export function tableOf(h: number): number {
  return (h >>> 20) & 0xfff;
}

/** TC_U32_HASH: the bucket. */
export function bucketOf(h: number): number {
  return (h >>> 12) & 0xff;
}

/** TC_U32_NODE: the key node id; 0 names the table itself. */
export function nodeOf(h: number): number {
  return h & 0xfff;
}

/**
 * Tables whose id the kernel picked (every tcf_proto's root table among them) have the 0x800
 * bit set (cls_u32.c id2handle); ids chosen by the user are below it.
 */
export function isKernelChosenTable(table: number): boolean {
  return (table & 0x800) !== 0;
}

export function formatU32Handle(h: number): string {
  return [tableOf(h), bucketOf(h), nodeOf(h)].map((part) => part.toString(16)).join(':');
}

/** struct tc_u32_key (16 bytes): `(packet[off] ^ val) & mask` must be 0. */
export const tcU32Key = struct('tc_u32_key', {
  mask: 'be32',
  val: 'be32',
  off: 's32',
  offmask: 's32',
});

/** struct tc_u32_sel without its flexible keys[] (16 bytes; one byte of padding after nkeys). */
export const tcU32SelHeader = struct('tc_u32_sel', {
  flags: 'u8',
  offshift: 'u8',
  nkeys: 'u8',
  pad: 'u8',
  offmask: 'be16',
  off: 'u16',
  offoff: 's16',
  hoff: 's16',
  hmask: 'be32',
});

export type U32Key = ReturnType<typeof tcU32Key.decode>;

export interface U32Selector {
  flags: number;
  /** Where the 32-bit word a linked table is hashed on starts, from the network header. */
  hoff: number;
  /** Mask of that word (host value; sent big-endian); the kernel shifts by its lowest set bit. */
  hmask: number;
  keys: U32Key[];
}

/** TCA_U32_SEL: the header, then nkeys keys. Offset-walking fields (off, offoff...) stay 0. */
export const u32Selector: Codec<U32Selector> = {
  nested: false,
  write(writer, selector) {
    if (selector.keys.length > 0xff) throw new RangeError('a u32 selector holds 255 keys at most');
    tcU32SelHeader.write(writer, {
      flags: selector.flags,
      nkeys: selector.keys.length,
      hoff: selector.hoff,
      hmask: selector.hmask,
    });
    for (const key of selector.keys) tcU32Key.write(writer, key);
  },
  decode(data, where) {
    const header = tcU32SelHeader.decode(data, where);
    const size = tcU32SelHeader.size + header.nkeys * tcU32Key.size;
    if (data.length < size) {
      throw new NetlinkProtocolError(
        `${where}: ${header.nkeys} keys need ${size} bytes, got ${data.length}`,
      );
    }
    const keys: U32Key[] = [];
    for (let i = 0; i < header.nkeys; i++) {
      keys.push(tcU32Key.readFrom(data, tcU32SelHeader.size + i * tcU32Key.size));
    }
    return { flags: header.flags, hoff: header.hoff, hmask: header.hmask, keys };
  },
};

/** TCA_OPTIONS of a u32 filter. Actions are numbered from 1 (their order of execution). */
export const u32Options = schema({
  classid: { type: TCA_U32_CLASSID, codec: u32 },
  hash: { type: TCA_U32_HASH, codec: u32 },
  link: { type: TCA_U32_LINK, codec: u32 },
  divisor: { type: TCA_U32_DIVISOR, codec: u32 },
  selector: { type: TCA_U32_SEL, codec: u32Selector },
  actions: { type: TCA_U32_ACT, codec: list(nested(actionEntry), (index) => index + 1) },
  flags: { type: TCA_U32_FLAGS, codec: u32 },
});

/** RTM_NEWTFILTER attributes of a u32 filter. */
export const u32Filter = schema({
  kind: { type: TCA_KIND, codec: string },
  options: { type: TCA_OPTIONS, codec: nested(u32Options) },
});

/** A u32 entry as a filter dump shows it: a hash table (divisor) or a key node. */
export interface U32Entry {
  handle: number;
  /** Buckets of a hash table; undefined for key nodes. */
  divisor: number | undefined;
  /** The table a key node links to (TCA_U32_LINK), as a handle ("100:" is 0x10000000). */
  link: number | undefined;
  classid: number | undefined;
  selector: U32Selector | undefined;
  mirred: MirredAction[];
}

/** One key matching a whole 32-bit word at `off` against `value` under `mask`. */
export function matchKey(off: number, value: number, mask: number): U32Key {
  return { mask: mask >>> 0, val: (value & mask) >>> 0, off, offmask: 0 };
}

export function sameSelector(a: U32Selector | undefined, b: U32Selector): boolean {
  if (!a) return false;
  return (
    a.flags === b.flags &&
    a.hoff === b.hoff &&
    a.hmask >>> 0 === b.hmask >>> 0 &&
    a.keys.length === b.keys.length &&
    a.keys.every(
      (key, i) =>
        key.mask >>> 0 === b.keys[i].mask >>> 0 &&
        key.val >>> 0 === b.keys[i].val >>> 0 &&
        key.off === b.keys[i].off &&
        key.offmask === b.keys[i].offmask,
    )
  );
}
