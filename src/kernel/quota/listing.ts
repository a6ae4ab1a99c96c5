/**
 * The decoders of the cap read (Quota.listCaps, issue 29), one per kernel reply, each one walk
 * of the netlink layer's AttributeCursor straight from the received bytes, reading every value
 * with the codec the attribute tables of ../nftables/schema.ts use:
 * - NFT_MSG_NEWOBJ, the GETOBJ dump of the quota objects (nf_tables_fill_obj_info): the table
 *   (compared in place, never made a string), the name, the type, NFTA_OBJ_HANDLE, the quota's
 *   NFTA_QUOTA_BYTES / CONSUMED / FLAGS, and the userdata's range;
 * - NFT_MSG_NEWSETELEM, the GETSETELEM dump of an object map (caps, throttle_caps): each
 *   element's 4-byte key (as a number) and NFTA_SET_ELEM_OBJREF.
 * Rules, as the table codec's (decodeAttributes over quotaListing, quotaAttributes and
 * setElementListAttributes): unknown attributes are skipped, a repeated attribute keeps its last
 * value, a fixed-width value must have its exact width, malformed input raises
 * NetlinkProtocolError; the tests hold the two decoders' results equal on recorded dumps.
 *
 * A CapListing (one per interface) remembers each object by name between reads. The kernel
 * never changes an object's userdata in place (nf_tables_updobj takes NFTA_OBJ_DATA only): a new
 * plan or rate is a new object with a new NFTA_OBJ_HANDLE. So an object whose handle is the one
 * seen before keeps its decoded address, plan and rate, and its userdata is not read again; and
 * a cap whose numbers and enforcement did not move keeps its KernelDataCap object of the last
 * read (the reads hand out caps that nothing changes afterwards: callers copy what they keep).
 */
import { AttributeCursor, NetlinkProtocolError, type NetlinkMessage, string } from '../../netlink';
import { nfgenmsg } from '../nftables/constants';
import {
  NFTA_DATA_VALUE,
  NFTA_LIST_ELEM,
  NFTA_OBJ_DATA,
  NFTA_OBJ_HANDLE,
  NFTA_OBJ_NAME,
  NFTA_OBJ_TABLE,
  NFTA_OBJ_TYPE,
  NFTA_OBJ_USERDATA,
  NFTA_QUOTA_BYTES,
  NFTA_QUOTA_CONSUMED,
  NFTA_QUOTA_FLAGS,
  NFTA_SET_ELEM_KEY,
  NFTA_SET_ELEM_LIST_ELEMENTS,
  NFTA_SET_ELEM_OBJREF,
  NFT_OBJECT_QUOTA,
  NFT_QUOTA_F_DEPLETED,
} from '../nftables/constants';
import type { CapPlan, KernelDataCap } from '../types';
import { capExtrasAt, decodeCapUserdata } from './cap-userdata';

/** The plan and throttle rate a quota object's userdata holds. */
export interface CapExtras {
  plan?: { plan: CapPlan };
  throttleBytesPerSecond: number | null;
}

/**
 * The plan and throttle rate in a listed object's userdata, by the userdata codec
 * (decodeCapUserdata). Most caps hold only the owner's comment (one TLV): those are not
 * decoded. What `extrasAt` must equal (the tests hold the two equal).
 */
export function extrasIn(userdata: Buffer | undefined): CapExtras {
  if (!userdata || userdata.length < 2 || userdata.length <= 2 + userdata[1]!) {
    return { throttleBytesPerSecond: null };
  }
  const { plan, throttleBytesPerSecond } = decodeCapUserdata(userdata);
  return plan === null ? { throttleBytesPerSecond } : { plan: { plan }, throttleBytesPerSecond };
}

/** One object answered with no plan and no rate, shared (nothing changes extras handed out). */
const NO_EXTRAS: CapExtras = Object.freeze({ throttleBytesPerSecond: null });

/**
 * `extrasIn` of buffer[start..end) read in place (capExtrasAt): no copy of the userdata or of
 * its TLVs, no owner string. A start's read meets every object for the first time, so this runs
 * for each of them there (issue 29: the first list after a start).
 */
export function extrasAt(buffer: Buffer, start: number, end: number): CapExtras {
  if (start < 0 || end - start < 2 || end - start <= 2 + buffer[start + 1]!) return NO_EXTRAS;
  const { plan, throttleBytesPerSecond } = capExtrasAt(buffer, start, end);
  if (plan === null)
    return throttleBytesPerSecond === null ? NO_EXTRAS : { throttleBytesPerSecond };
  return { plan: { plan }, throttleBytesPerSecond };
}

/** One quota object of ours, as the last read saw it. */
export interface ListedQuota {
  name: string;
  /** NFTA_OBJ_HANDLE as two u32 halves (what tells a replaced object from the same one). */
  handleHigh: number;
  handleLow: number;
  address: string;
  /** The address as a big-endian u32, as map keys are compared. */
  key: number;
  extras: CapExtras;
  quotaBytes: number;
  usedBytes: number;
  depleted: boolean;
  /** The cap handed out last; reused while nothing in it moved. */
  cap: KernelDataCap | null;
  /** The CapListing read that listed it last (a repeated object is listed once). */
  seen: number;
}

const MESSAGE = new AttributeCursor();
const NESTED = new AttributeCursor();
const LIST = new AttributeCursor();
const ELEMENT = new AttributeCursor();
const KEY = new AttributeCursor();

/** A be64 at `offset` as a Number: exact below 2^53, rounded to nearest above as Number(bigint). */
function be64Number(buffer: Buffer, offset: number): number {
  return buffer.readUInt32BE(offset) * 0x1_0000_0000 + buffer.readUInt32BE(offset + 4);
}

/** Where an attribute list starts in an nf_tables message (after struct nfgenmsg). */
function attributesOf(message: NetlinkMessage, cursor: AttributeCursor): AttributeCursor {
  const payload = message.payload;
  if (payload.length < nfgenmsg.size) {
    throw new NetlinkProtocolError(`nf_tables message of ${payload.length} bytes has no nfgenmsg`);
  }
  return cursor.reset(payload, nfgenmsg.size, payload.length);
}

/**
 * The element map of an object map's dump: key (a 4-byte address, as a big-endian u32) → the
 * name of the object it refers to. Elements with another key length are left out (as
 * elementTargets does).
 */
export function decodeObjrefElements(messages: readonly NetlinkMessage[]): Map<number, string> {
  const targets = new Map<number, string>();
  for (const message of messages) {
    const top = attributesOf(message, MESSAGE);
    while (top.next()) {
      if (top.type !== NFTA_SET_ELEM_LIST_ELEMENTS) continue;
      const list = top.enter(LIST);
      while (list.next()) {
        if (list.type !== NFTA_LIST_ELEM) continue;
        const element = list.enter(ELEMENT);
        let key: number | null = null;
        let objref: string | undefined;
        while (element.next()) {
          if (element.type === NFTA_SET_ELEM_KEY) {
            key = null;
            const value = element.enter(KEY);
            while (value.next()) {
              if (value.type === NFTA_DATA_VALUE) {
                key = value.length === 4 ? value.buffer.readUInt32BE(value.start) : null;
              }
            }
          } else if (element.type === NFTA_SET_ELEM_OBJREF) {
            objref = element.value(string, 'objref');
          }
        }
        if (key !== null && objref !== undefined) targets.set(key, objref);
      }
    }
  }
  return targets;
}

/** The quota objects of one table, decoded from their dump, remembered between reads. */
export class CapListing {
  /** The objects of the last read by NFTA_OBJ_HANDLE (unique in a table while it lives). */
  private known = new Map<number, ListedQuota>();
  /** Reads so far: an entry's `seen` is the read that listed it last. */
  private reads = 0;
  private readonly tableBytes: Buffer;

  constructor(readonly table: string) {
    this.tableBytes = Buffer.from(table, 'utf8');
  }

  /**
   * The dump's quota objects of this table whose names are ours (q_a_b_c_d), in dump order,
   * with their numbers as read now. Objects no longer listed are forgotten.
   */
  objects(messages: readonly NetlinkMessage[]): ListedQuota[] {
    const previous = this.known;
    const known = new Map<number, ListedQuota>();
    const read = ++this.reads;
    const listed: ListedQuota[] = [];
    for (const message of messages) {
      const entry = this.decodeObject(message, previous);
      if (entry !== null && entry.seen !== read) {
        entry.seen = read;
        if (entry.handleHigh >= 0) known.set(handleOf(entry), entry);
        listed.push(entry);
      }
    }
    this.known = known;
    return listed;
  }

  /** Whether any of `listed` throttles over its cap (then throttle_caps is read too). */
  static throttling(listed: readonly ListedQuota[]): boolean {
    return listed.some((entry) => entry.extras.throttleBytesPerSecond !== null);
  }

  /**
   * address → cap: `routes` the caps map (key → object name), `throttleRoutes` throttle_caps.
   * A cap holds only where the map leads packets to its object.
   */
  caps(
    listed: readonly ListedQuota[],
    routes: ReadonlyMap<number, string>,
    throttleRoutes: ReadonlyMap<number, string>,
  ): Map<string, KernelDataCap> {
    const caps = new Map<string, KernelDataCap>();
    for (const entry of listed) {
      const throttle = entry.extras.throttleBytesPerSecond;
      const enforced = (throttle === null ? routes : throttleRoutes).get(entry.key) === entry.name;
      const throttled = throttle === null ? undefined : enforced && entry.depleted;
      const last = entry.cap;
      if (
        last === null ||
        last.quotaBytes !== entry.quotaBytes ||
        last.usedBytes !== entry.usedBytes ||
        last.enforced !== enforced ||
        last.throttled !== throttled
      ) {
        entry.cap = capOf(entry, enforced, throttle, throttled);
      }
      caps.set(entry.address, entry.cap!);
    }
    return caps;
  }

  /** One NFT_MSG_NEWOBJ of the dump; null for an object not ours, of another table or type. */
  private decodeObject(
    message: NetlinkMessage,
    previous: Map<number, ListedQuota>,
  ): ListedQuota | null {
    const top = attributesOf(message, MESSAGE);
    const buffer = top.buffer;
    let ourTable = false;
    let nameStart = -1;
    let nameEnd = -1;
    let type: number | undefined;
    let handleHigh = -1;
    let handleLow = -1;
    let dataStart = -1;
    let dataEnd = -1;
    let userdataStart = -1;
    let userdataEnd = -1;
    while (top.next()) {
      switch (top.type) {
        case NFTA_OBJ_TABLE: {
          const nul = buffer.indexOf(0, top.start);
          const end = nul === -1 || nul > top.end ? top.end : nul;
          ourTable = this.tableBytes.compare(buffer, top.start, end) === 0;
          break;
        }
        case NFTA_OBJ_NAME: {
          nameStart = top.start;
          const nul = buffer.indexOf(0, top.start);
          nameEnd = nul === -1 || nul > top.end ? top.end : nul;
          break;
        }
        case NFTA_OBJ_TYPE:
          type = buffer.readUInt32BE(top.at(4, 'object.type'));
          break;
        case NFTA_OBJ_HANDLE: {
          const at = top.at(8, 'object.handle');
          handleHigh = buffer.readUInt32BE(at);
          handleLow = buffer.readUInt32BE(at + 4);
          break;
        }
        case NFTA_OBJ_DATA:
          dataStart = top.start;
          dataEnd = top.end;
          break;
        case NFTA_OBJ_USERDATA:
          userdataStart = top.start;
          userdataEnd = top.end;
          break;
      }
    }
    // The kernel filters the dump; a kernel that ignored the filter must not add others'.
    if (!ourTable || nameStart < 0 || type !== NFT_OBJECT_QUOTA || dataStart < 0) return null;
    const { quotaBytes, usedBytes, flags } = quotaNumbers(buffer, dataStart, dataEnd);
    // The same handle and name as last time: the same object, whose userdata cannot change.
    let entry: ListedQuota | null | undefined =
      handleHigh >= 0 ? previous.get(handleHigh * 0x1_0000_0000 + handleLow) : undefined;
    const same =
      entry !== undefined &&
      entry.handleHigh === handleHigh &&
      entry.handleLow === handleLow &&
      sameText(entry.name, buffer, nameStart, nameEnd);
    if (!same || entry == null) {
      entry = newEntry(buffer, nameStart, nameEnd, handleHigh, handleLow);
      if (entry === null) return null;
      entry.extras = extrasAt(buffer, userdataStart, userdataEnd);
    }
    entry.quotaBytes = quotaBytes;
    entry.usedBytes = usedBytes;
    entry.depleted = (flags & NFT_QUOTA_F_DEPLETED) !== 0 || usedBytes >= quotaBytes;
    return entry;
  }
}

/**
 * A quota object seen for the first time (or replaced); null for a name not ours. Its name is
 * read from the dump's bytes: `q_A_B_C_D` with each octet as quotaObjectName writes it (1 to 3
 * digits, no leading zero, at most 255), as addressOfObject reads the decoded string (the tests
 * hold the two equal); the address and its map key come from the same walk, and only a name of
 * ours (ASCII, so latin1 reads it as UTF-8 would) is made a string. Extras are the caller's.
 */
function newEntry(
  buffer: Buffer,
  nameStart: number,
  nameEnd: number,
  handleHigh: number,
  handleLow: number,
): ListedQuota | null {
  const key = keyOfName(buffer, nameStart, nameEnd);
  if (key < 0) return null;
  return {
    name: buffer.toString('latin1', nameStart, nameEnd),
    handleHigh,
    handleLow,
    address: `${key >>> 24}.${(key >>> 16) & 0xff}.${(key >>> 8) & 0xff}.${key & 0xff}`,
    key,
    extras: NO_EXTRAS,
    quotaBytes: 0,
    usedBytes: 0,
    depleted: false,
    cap: null,
    seen: 0,
  };
}

const DIGIT_0 = 0x30;
const UNDERSCORE = 0x5f;

/**
 * The address of a quota object name `q_A_B_C_D` in buffer[start..end), as the big-endian u32
 * a 4-byte map key reads as; -1 for a name that is not ours.
 */
export function keyOfName(buffer: Buffer, start: number, end: number): number {
  if (end - start < 9 || buffer[start] !== 0x71 /* q */) return -1;
  let at = start + 1;
  let key = 0;
  for (let octet = 0; octet < 4; octet++) {
    if (buffer[at] !== UNDERSCORE) return -1;
    at += 1;
    const first = at;
    let value = 0;
    while (at < end && at - first < 4) {
      const digit = buffer[at]! - DIGIT_0;
      if (digit < 0 || digit > 9) break;
      value = value * 10 + digit;
      at += 1;
    }
    const digits = at - first;
    if (digits === 0 || digits > 3 || value > 255) return -1;
    if (digits > 1 && buffer[first] === DIGIT_0) return -1;
    key = key * 256 + value;
  }
  return at === end ? key : -1;
}

/** An object's handle as one Number key (handles count up from 1: far below 2^53). */
function handleOf(entry: ListedQuota): number {
  return entry.handleHigh * 0x1_0000_0000 + entry.handleLow;
}

/** Whether buffer[start..end) holds exactly the ASCII text `text` (names of ours are ASCII). */
function sameText(text: string, buffer: Buffer, start: number, end: number): boolean {
  if (end - start !== text.length) return false;
  for (let i = 0; i < text.length; i++) {
    if (buffer[start + i] !== text.charCodeAt(i)) return false;
  }
  return true;
}

/** NFTA_QUOTA_BYTES, CONSUMED and FLAGS of an NFTA_OBJ_DATA payload (0 where absent). */
function quotaNumbers(
  buffer: Buffer,
  start: number,
  end: number,
): { quotaBytes: number; usedBytes: number; flags: number } {
  let quotaBytes = 0;
  let usedBytes = 0;
  let flags = 0;
  const data = NESTED.reset(buffer, start, end);
  while (data.next()) {
    if (data.type === NFTA_QUOTA_BYTES) quotaBytes = be64Number(buffer, data.at(8, 'quota.bytes'));
    else if (data.type === NFTA_QUOTA_CONSUMED)
      usedBytes = be64Number(buffer, data.at(8, 'quota.consumed'));
    else if (data.type === NFTA_QUOTA_FLAGS) flags = buffer.readUInt32BE(data.at(4, 'quota.flags'));
  }
  return { quotaBytes, usedBytes, flags };
}

/**
 * The cap an entry lists: a plan only where it has one, the throttle fields only on a cap that
 * throttles (object literals rather than spreads: a start builds one for every cap).
 */
function capOf(
  entry: ListedQuota,
  enforced: boolean,
  throttle: number | null,
  throttled: boolean | undefined,
): KernelDataCap {
  const { quotaBytes, usedBytes } = entry;
  const plan = entry.extras.plan?.plan;
  if (throttle === null) {
    return plan === undefined
      ? { quotaBytes, usedBytes, enforced }
      : { quotaBytes, usedBytes, enforced, plan };
  }
  return plan === undefined
    ? { quotaBytes, usedBytes, enforced, throttleBytesPerSecond: throttle, throttled }
    : { quotaBytes, usedBytes, enforced, plan, throttleBytesPerSecond: throttle, throttled };
}
