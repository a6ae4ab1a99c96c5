/**
 * The userdata of a quota object (NFTA_OBJ_USERDATA, Linux 5.10+): what a cap is that the
 * kernel has no field for, kept beside the quota so that a daemon restart reads every plan back
 * from the kernel alone (DESIGN §1). libnftnl's TLVs {u8 type, u8 length, value}
 * (./../nftables/userdata.ts); NFT_USERDATA_MAXLEN (256, linux/netfilter/nf_tables.h) bounds the
 * whole. Numbers are big-endian, as nf_tables' own attributes are.
 *
 * | type | field                    | value                                                     |
 * | ---- | ------------------------ | --------------------------------------------------------- |
 * | 0x00 | owner                    | "wg-peerd peer <public key>\0": libnftnl's                |
 * |      |                          | NFTNL_UDATA_OBJ_COMMENT, which `nft list` prints          |
 * | 0xe0 | period                   | u8: 1 day, 2 week, 3 month                                |
 * | 0xe1 | period start             | s64 ms since the epoch, s16 offset in minutes east of UTC |
 * | 0xe2 | current period from      | s64 ms: when the count of this period began (last reset)  |
 * | 0xe3 | previous period usage    | u64 bytes: what the last period reset closed with         |
 * | 0x40 | throttle rate            | u64 bytes/second over the cap (afterCap "throttle")       |
 *
 * Types 1-0x3f are left to libnftnl (enum nftnl_udata_obj_types has only the comment today);
 * nft ignores types it does not know when it lists an object (the VM's kernel test checks that
 * `nft list` still prints the owner comment of a planned cap). Unknown types read here are kept
 * as they are, so a field another version of the daemon wrote survives a rewrite. A period is
 * all four plan fields or none: a plan with a field missing or malformed reads as no plan. No
 * throttle rate (or a malformed one) reads as a cap that blocks, as caps written before
 * throttling existed do.
 */
import { NFTNL_UDATA_COMMENT } from '../nftables/constants';
import { type UserdataTlv, decodeUserdata, encodeUserdata } from '../nftables/userdata';
import type { CapPlan, Period } from '../types';
import { OWNER_PREFIX } from './naming';

export const UDATA_PERIOD = 0xe0;
export const UDATA_PERIOD_START = 0xe1;
export const UDATA_PERIOD_FROM = 0xe2;
export const UDATA_PREVIOUS_USED = 0xe3;
/** The fair-use throttle's `throttleBytesPerSecond` (afterCap "throttle"). */
export const UDATA_THROTTLE_RATE = 0x40;

const PERIOD_CODES: Readonly<Record<Period, number>> = { day: 1, week: 2, month: 3 };
const PERIOD_OF_CODE = new Map<number, Period>(
  Object.entries(PERIOD_CODES).map(([period, code]) => [code, period as Period]),
);

/** The plan TLVs, in the order written. */
const PLAN_TYPES = new Set([
  UDATA_PERIOD,
  UDATA_PERIOD_START,
  UDATA_PERIOD_FROM,
  UDATA_PREVIOUS_USED,
]);

/** What a quota object's userdata says. */
export interface CapUserdata {
  /** The owner's public key; null when the comment is not ours (or absent). */
  owner: string | null;
  /** The billing period; null when the cap has none. */
  plan: CapPlan | null;
  /** Bytes per second once the cap is used up (afterCap "throttle"); null: blocked. */
  throttleBytesPerSecond: number | null;
  /** TLVs of other types, kept as read (rewritten unchanged). */
  others: UserdataTlv[];
}

/** The TLVs encodeCapUserdata writes itself; others are kept as read. */
const OURS = new Set([NFTNL_UDATA_COMMENT, UDATA_THROTTLE_RATE, ...PLAN_TYPES]);

function s64(value: number): Buffer {
  const buffer = Buffer.allocUnsafe(8); // every byte written
  buffer.writeBigInt64BE(BigInt(value));
  return buffer;
}

function u64(value: number): Buffer {
  const buffer = Buffer.allocUnsafe(8); // every byte written
  buffer.writeBigUInt64BE(BigInt(value));
  return buffer;
}

export function encodeCapUserdata(userdata: CapUserdata): Buffer {
  const tlvs: UserdataTlv[] = [];
  if (userdata.owner !== null) {
    tlvs.push({
      type: NFTNL_UDATA_COMMENT,
      value: Buffer.from(`${OWNER_PREFIX}${userdata.owner}\0`, 'utf8'),
    });
  }
  const plan = userdata.plan;
  if (plan !== null) {
    const start = Buffer.alloc(10);
    start.writeBigInt64BE(BigInt(plan.periodStart.at));
    start.writeInt16BE(plan.periodStart.offsetMinutes, 8);
    tlvs.push(
      { type: UDATA_PERIOD, value: Buffer.from([PERIOD_CODES[plan.period]]) },
      { type: UDATA_PERIOD_START, value: start },
      { type: UDATA_PERIOD_FROM, value: s64(plan.periodFrom) },
    );
    if (plan.previousUsedBytes !== null) {
      tlvs.push({ type: UDATA_PREVIOUS_USED, value: u64(plan.previousUsedBytes) });
    }
  }
  if (userdata.throttleBytesPerSecond !== null) {
    tlvs.push({ type: UDATA_THROTTLE_RATE, value: u64(userdata.throttleBytesPerSecond) });
  }
  for (const tlv of userdata.others) if (!OURS.has(tlv.type)) tlvs.push(tlv);
  return encodeUserdata(tlvs);
}

export function decodeCapUserdata(data: Buffer | undefined): CapUserdata {
  const out: CapUserdata = { owner: null, plan: null, throttleBytesPerSecond: null, others: [] };
  if (!data) return out;
  const fields = new Map<number, Buffer>();
  for (const tlv of decodeUserdata(data)) {
    if (tlv.type === NFTNL_UDATA_COMMENT) {
      const end = tlv.value.indexOf(0);
      const comment = tlv.value.toString('utf8', 0, end === -1 ? tlv.value.length : end);
      if (comment.startsWith(OWNER_PREFIX)) out.owner = comment.slice(OWNER_PREFIX.length);
      else out.others.push(tlv);
    } else if (tlv.type === UDATA_THROTTLE_RATE) {
      out.throttleBytesPerSecond = rateOf(tlv.value);
    } else if (PLAN_TYPES.has(tlv.type)) {
      fields.set(tlv.type, tlv.value);
    } else {
      out.others.push(tlv);
    }
  }
  out.plan = planOf(fields);
  return out;
}

/**
 * The plan and throttle rate of the userdata in buffer[start..end), read in place: what
 * decodeCapUserdata answers for them (the same TLV walk, a later TLV of a type replacing an
 * earlier one, the same checks), without copying a TLV or decoding the owner. For the cap read,
 * which meets every object of a table at a start.
 */
export function capExtrasAt(
  buffer: Buffer,
  start: number,
  end: number,
): { plan: CapPlan | null; throttleBytesPerSecond: number | null } {
  let throttleBytesPerSecond: number | null = null;
  let period = -1;
  let periodLength = 0;
  let periodStart = -1;
  let periodStartLength = 0;
  let from = -1;
  let fromLength = 0;
  let previous = -1;
  let previousLength = 0;
  let offset = start;
  while (offset + 2 <= end) {
    const type = buffer[offset]!;
    const length = buffer[offset + 1]!;
    const value = offset + 2;
    if (value + length > end) break;
    if (type === UDATA_THROTTLE_RATE) {
      throttleBytesPerSecond = length === 8 ? rateAt(buffer, value) : null;
    } else if (type === UDATA_PERIOD) {
      period = value;
      periodLength = length;
    } else if (type === UDATA_PERIOD_START) {
      periodStart = value;
      periodStartLength = length;
    } else if (type === UDATA_PERIOD_FROM) {
      from = value;
      fromLength = length;
    } else if (type === UDATA_PREVIOUS_USED) {
      previous = value;
      previousLength = length;
    }
    offset = value + length;
  }
  const name = period >= 0 && periodLength === 1 ? PERIOD_OF_CODE.get(buffer[period]!) : undefined;
  if (name === undefined || periodStartLength !== 10 || fromLength !== 8) {
    return { plan: null, throttleBytesPerSecond };
  }
  if (previous >= 0 && previousLength !== 8) return { plan: null, throttleBytesPerSecond };
  const numbers = [
    buffer.readBigInt64BE(periodStart),
    buffer.readBigInt64BE(from),
    previous >= 0 ? buffer.readBigUInt64BE(previous) : 0n,
  ];
  if (numbers.some((n) => n > BigInt(Number.MAX_SAFE_INTEGER) || n < -8_640_000_000_000_000n)) {
    return { plan: null, throttleBytesPerSecond };
  }
  return {
    plan: {
      period: name,
      periodStart: { at: Number(numbers[0]), offsetMinutes: buffer.readInt16BE(periodStart + 8) },
      periodFrom: Number(numbers[1]),
      previousUsedBytes: previous >= 0 ? Number(numbers[2]) : null,
    },
    throttleBytesPerSecond,
  };
}

/** A u64 rate at `offset`; null when not a safe integer (as rateOf). */
function rateAt(buffer: Buffer, offset: number): number | null {
  const rate = buffer.readBigUInt64BE(offset);
  return rate > BigInt(Number.MAX_SAFE_INTEGER) ? null : Number(rate);
}

function planOf(fields: ReadonlyMap<number, Buffer>): CapPlan | null {
  const code = fields.get(UDATA_PERIOD);
  const start = fields.get(UDATA_PERIOD_START);
  const from = fields.get(UDATA_PERIOD_FROM);
  const previous = fields.get(UDATA_PREVIOUS_USED);
  const period = code?.length === 1 ? PERIOD_OF_CODE.get(code[0]!) : undefined;
  if (period === undefined || start?.length !== 10 || from?.length !== 8) return null;
  if (previous !== undefined && previous.length !== 8) return null;
  const numbers = [
    start.readBigInt64BE(0),
    from.readBigInt64BE(0),
    previous?.readBigUInt64BE(0) ?? 0n,
  ];
  if (numbers.some((n) => n > BigInt(Number.MAX_SAFE_INTEGER) || n < -8_640_000_000_000_000n)) {
    return null;
  }
  return {
    period,
    periodStart: { at: Number(numbers[0]), offsetMinutes: start.readInt16BE(8) },
    periodFrom: Number(numbers[1]),
    previousUsedBytes: previous === undefined ? null : Number(numbers[2]),
  };
}

/** A u64 rate; null (a cap that blocks) when malformed or not a safe integer. */
function rateOf(value: Buffer): number | null {
  if (value.length !== 8) return null;
  const rate = value.readBigUInt64BE(0);
  return rate > BigInt(Number.MAX_SAFE_INTEGER) ? null : Number(rate);
}
