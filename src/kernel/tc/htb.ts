/**
 * The HTB qdisc and its classes: struct layouts and attribute tables, plus the arithmetic tc does
 * to turn a burst in bytes into psched ticks.
 *
 * Sources: /usr/include/linux/pkt_sched.h (struct tc_ratespec, struct tc_htb_opt,
 * struct tc_htb_glob, TCA_HTB_*, TC_HTB_PROTOVER, enum tc_link_layer); the tick arithmetic follows
 * iproute2 tc/tc_core.c (tc_core_init, tc_calc_xmittime) and the kernel's psched_show
 * (net/sched/sch_api.c), which writes /proc/net/psched.
 */
import { type Attributes, nested, schema, string, struct, u32, u64 } from '../../netlink';
import { TCA_KIND, TCA_OPTIONS } from './tc';

// enum TCA_HTB_* (pkt_sched.h)
export const TCA_HTB_PARMS = 1;
export const TCA_HTB_INIT = 2;
export const TCA_HTB_DIRECT_QLEN = 5;
export const TCA_HTB_RATE64 = 6;
export const TCA_HTB_CEIL64 = 7;

/** TC_HTB_PROTOVER (pkt_sched.h): the version tc_htb_glob must carry. */
export const TC_HTB_PROTOVER = 3;
/** enum tc_link_layer (pkt_sched.h): rates count Ethernet-style bytes, no ATM cells. */
export const TC_LINKLAYER_ETHERNET = 1;

/** struct tc_ratespec (12 bytes). */
export const tcRatespec = struct('tc_ratespec', {
  cellLog: 'u8',
  linklayer: 'u8',
  overhead: 'u16',
  cellAlign: 's16',
  mpu: 'u16',
  rate: 'u32',
});

/** struct tc_htb_opt (44 bytes): a class's rate, ceil, buffers (in psched ticks) and quantum. */
export const tcHtbOpt = struct('tc_htb_opt', {
  rate: tcRatespec,
  ceil: tcRatespec,
  buffer: 'u32',
  cbuffer: 'u32',
  quantum: 'u32',
  level: 'u32',
  prio: 'u32',
});

/** struct tc_htb_glob (20 bytes): the qdisc's version, r2q and default class. */
export const tcHtbGlob = struct('tc_htb_glob', {
  version: 'u32',
  rate2quantum: 'u32',
  defcls: 'u32',
  debug: 'u32',
  directPkts: 'u32',
});

export const htbQdiscOptions = schema({
  init: { type: TCA_HTB_INIT, codec: tcHtbGlob },
  directQlen: { type: TCA_HTB_DIRECT_QLEN, codec: u32 },
});

export const htbClassOptions = schema({
  parms: { type: TCA_HTB_PARMS, codec: tcHtbOpt },
  rate64: { type: TCA_HTB_RATE64, codec: u64 },
  ceil64: { type: TCA_HTB_CEIL64, codec: u64 },
});

/** RTM_NEWQDISC attributes of an HTB qdisc. */
export const htbQdisc = schema({
  kind: { type: TCA_KIND, codec: string },
  options: { type: TCA_OPTIONS, codec: nested(htbQdiscOptions) },
});

/** RTM_NEWTCLASS attributes of an HTB class. */
export const htbClass = schema({
  kind: { type: TCA_KIND, codec: string },
  options: { type: TCA_OPTIONS, codec: nested(htbClassOptions) },
});

/** The largest rate tc_ratespec's u32 field holds; faster rates go into TCA_HTB_RATE64/CEIL64. */
const U32_RATE_LIMIT = 0xffffffff;

/**
 * Psched ticks per microsecond, as iproute2 computes it from /proc/net/psched: four hex words
 * t2us, us2t, clock resolution and hrtimer frequency. On every kernel since 2.6.3x the kernel
 * writes 1000 (NSEC_PER_USEC), 64 (PSCHED_TICKS2NS(1)) and 1000000, giving 15.625 ticks/us, i.e.
 * one tick is 64 ns (PSCHED_SHIFT 6).
 */
export function ticksPerMicrosecond(psched: string): number {
  const words = psched
    .trim()
    .split(/\s+/)
    .map((word) => Number.parseInt(word, 16));
  const [t2usRaw, us2t, clockRes] = words;
  if (words.length < 3 || words.some((w) => !Number.isFinite(w)) || !us2t || !clockRes) {
    throw new Error(`cannot parse /proc/net/psched: ${JSON.stringify(psched)}`);
  }
  // tc_core.c's compatibility rule: a nanosecond clock resolution means a multiplier of 1.
  const t2us = clockRes === 1_000_000_000 ? us2t : t2usRaw;
  return (t2us / us2t) * (clockRes / 1_000_000);
}

/** The value the kernel has published since 2.6.3x (see ticksPerMicrosecond). */
export const DEFAULT_TICKS_PER_MICROSECOND = 15.625;

/**
 * Time to send `bytes` at `rate` bytes/s in psched ticks, computed as tc does
 * (tc_calc_xmittime): whole microseconds first, then ticks, both truncated. So a class set by
 * wg-peerd carries the very buffer `tc class add ... burst <bytes>` would give it.
 */
export function transmitTicks(rate: number, bytes: number, ticksPerUs: number): number {
  const microseconds = Math.floor((1_000_000 * bytes) / rate);
  const ticks = Math.floor(microseconds * ticksPerUs);
  if (ticks > 0xffffffff) {
    throw new RangeError(`a ${bytes}-byte burst at ${rate} B/s does not fit in 32-bit ticks`);
  }
  return ticks;
}

/**
 * How many bytes a class may send at once above its rate: 50 ms worth of traffic plus one
 * 1600-byte packet (tc's default MTU allowance), at most 4 GiB - 1 (what tc's u32 sizes hold).
 * The bucket is what lets a class catch up when its dequeue comes late: a class that is served
 * 30 ms late still sends its full rate. tc's own default, rate/HZ + MTU with HZ read from
 * /proc/net/psched, leaves only the MTU on hrtimer kernels (HZ 10^9), and a loaded host or
 * virtual machine that wakes the qdisc a few milliseconds late then loses rate for good
 * (measured in the test VM: 20% under the limit at 12 ms of burst). Over any second a class
 * sends at most 5% above its rate.
 */
export const BURST_WINDOW_US = 50_000;
export const BURST_PACKET_BYTES = 1600;
export const BURST_MAX_BYTES = 0xffffffff;

export function burstBytes(rate: number): number {
  return Math.min(
    BURST_MAX_BYTES,
    Math.ceil((rate * BURST_WINDOW_US) / 1_000_000) + BURST_PACKET_BYTES,
  );
}

/**
 * Quantum: the bytes a class may send per round when it borrows. Set explicitly, so the kernel
 * never derives it from rate/r2q and logs "quantum of class ... is small/big" outside
 * [1000, 200000] (sch_htb.c htb_change_class); clamped to that range, at least one MTU.
 */
export const QUANTUM_MIN = BURST_PACKET_BYTES;
export const QUANTUM_MAX = 200_000;

export function quantumFor(rate: number): number {
  return Math.min(QUANTUM_MAX, Math.max(QUANTUM_MIN, Math.floor(rate / 10)));
}

export interface HtbClassParameters {
  /** Bytes per second, rate and ceil alike. */
  rate: number;
  ticksPerUs: number;
}

/**
 * TCA_OPTIONS of a class whose rate and ceil are both `rate`: it never borrows. Linklayer
 * Ethernet and no TCA_HTB_RTAB/CTAB: since Linux 3.8 the kernel computes transmit times itself
 * and reads a rate table only to detect ATM on "linklayer unaware" specs (htb_change_class).
 */
export function htbClassOptionsFor({
  rate,
  ticksPerUs,
}: HtbClassParameters): Attributes<typeof htbClassOptions> {
  if (!Number.isSafeInteger(rate) || rate <= 0) {
    throw new RangeError(`an HTB rate must be a positive integer of bytes/s, got ${rate}`);
  }
  const buffer = transmitTicks(rate, burstBytes(rate), ticksPerUs);
  const wide = rate > U32_RATE_LIMIT;
  const spec = {
    cellLog: 0,
    linklayer: TC_LINKLAYER_ETHERNET,
    overhead: 0,
    cellAlign: 0,
    mpu: 0,
    rate: wide ? U32_RATE_LIMIT : rate,
  };
  return {
    parms: {
      rate: spec,
      ceil: spec,
      buffer,
      cbuffer: buffer,
      quantum: quantumFor(rate),
    },
    rate64: wide ? BigInt(rate) : undefined,
    ceil64: wide ? BigInt(rate) : undefined,
  };
}

/** A class's rate in bytes/s as the kernel reports it: RATE64 when present, else the u32 field. */
export function rateOf(options: { parms?: { rate?: { rate?: number } }; rate64?: bigint }): number {
  if (options.rate64 !== undefined) return Number(options.rate64);
  return options.parms?.rate?.rate ?? 0;
}
