/**
 * The journal's records and the state they add up to. A record is one line: eight hex digits of
 * the CRC-32 of the JSON text, a space, the JSON text, a newline. Replaying the records of a
 * journal in order gives the saved state; a compacted journal is the shortest list of records
 * that gives the same state. Pure: no I/O, no clock.
 *
 * Why lines with a checksum: a crash can leave the last line half written (the write that was
 * never acknowledged); its missing newline or wrong checksum shows it, and it is dropped. A bad
 * line with good lines after it is no torn write but damage, and is refused (see `decodeJournal`).
 */
import { crc32 } from 'node:zlib';

/** A data cap as saved: the cap and the bytes it had counted when last saved. */
export interface SavedCap {
  quotaBytes: number;
  usedBytes: number;
  /** Its billing period (issue 19); absent in journals written before periods existed: none. */
  plan?: SavedPlan | null;
  /** Bytes per second over the cap (afterCap "throttle"); absent: the cap blocks. */
  throttleBytesPerSecond?: number;
}

/** A billing period as saved: what the quota object's userdata holds (src/kernel/quota). */
export interface SavedPlan {
  period: 'day' | 'week' | 'month';
  /** Milliseconds since the epoch, and the offset (minutes east of UTC) periods count on. */
  periodStart: { at: number; offsetMinutes: number };
  /** When the current period's count began (its last reset), ms since the epoch. */
  periodFrom: number;
  previousUsedBytes: number | null;
}

/** One peer as saved. Never a private key. */
export interface SavedPeer {
  publicKey: string;
  /** CIDR texts, as the kernel holds them ("10.8.0.2/32"). */
  allowedIps: string[];
  /** Bytes per second each direction, or null. */
  limit: number | null;
  cap: SavedCap | null;
  /** Suspended (issue 19); absent in journals written before suspension existed: false. */
  suspended?: boolean;
}

/** The interface as the daemon created it (its private key is in a file of its own). */
export interface SavedInterface {
  listenPort: number;
  /** CIDR texts of its addresses ("10.8.0.1/24"). */
  addresses: string[];
  publicKey: string;
}

/** The boot and interface the journal describes (/proc/sys/kernel/random/boot_id, ifindex). */
export interface SavedBoot {
  bootId: string;
  ifindex: number;
  interfaceName: string;
}

/**
 * When a peer's cap ran out in its current period, as the daemon learned it (issue 19: the list's
 * `data_cap.exhausted_at`), for the quota bytes it ran out at.
 */
export interface SavedExhaustion {
  quotaBytes: number;
  /** Ms since the epoch. */
  at: number;
}

export interface SavedState {
  boot: SavedBoot | null;
  /** Set only when the daemon created the interface. */
  iface: SavedInterface | null;
  /** Committed peers by public key. */
  peers: Map<string, SavedPeer>;
  /** Creates whose intent is saved but whose commit is not: never answered, never usable. */
  intents: Map<string, string[]>;
  /** Exhaustion times by public key (of committed peers); absent in older journals: none. */
  exhausted?: Map<string, SavedExhaustion>;
}

export type JournalRecord =
  | ({ t: 'boot' } & SavedBoot)
  | ({ t: 'iface' } & SavedInterface)
  /** A create about to be made in the kernel (saved before it). */
  | { t: 'intent'; k: string; ips: string[] }
  /** A committed peer, whole (a create's commit, an adopted peer, a compacted journal). */
  | {
      t: 'peer';
      k: string;
      ips: string[];
      limit: number | null;
      cap: SavedCap | null;
      /** Present (true) only for a suspended peer. */
      s?: true;
    }
  /** A create that failed in the kernel after its intent. */
  | { t: 'abort'; k: string }
  | { t: 'del'; k: string }
  | { t: 'limit'; k: string; bps: number | null }
  | { t: 'cap'; k: string; cap: SavedCap | null }
  /** Suspended or resumed. */
  | { t: 'susp'; k: string; s: boolean }
  /** Usage checkpoint: public key → bytes counted, only the counters that changed. */
  | { t: 'usage'; u: Record<string, number> }
  /** The peer's cap ran out at `at` with `q` quota bytes; `at` null: it has room again. */
  | { t: 'exh'; k: string; q?: number; at: number | null };

export function emptyState(): SavedState {
  return { boot: null, iface: null, peers: new Map(), intents: new Map() };
}

/** Applies one record to the state in place. Records about unknown peers change nothing. */
export function applyRecord(state: SavedState, record: JournalRecord): void {
  switch (record.t) {
    case 'boot':
      state.boot = {
        bootId: record.bootId,
        ifindex: record.ifindex,
        interfaceName: record.interfaceName,
      };
      return;
    case 'iface':
      state.iface = {
        listenPort: record.listenPort,
        addresses: [...record.addresses],
        publicKey: record.publicKey,
      };
      return;
    case 'intent':
      state.intents.set(record.k, [...record.ips]);
      return;
    case 'peer':
      state.intents.delete(record.k);
      state.peers.set(record.k, {
        publicKey: record.k,
        allowedIps: [...record.ips],
        limit: record.limit,
        cap: record.cap === null ? null : { ...record.cap },
        ...(record.s === true ? { suspended: true } : {}),
      });
      return;
    case 'abort':
      state.intents.delete(record.k);
      return;
    case 'del':
      state.intents.delete(record.k);
      state.peers.delete(record.k);
      state.exhausted?.delete(record.k);
      return;
    case 'limit': {
      const peer = state.peers.get(record.k);
      if (peer) peer.limit = record.bps;
      return;
    }
    case 'cap': {
      const peer = state.peers.get(record.k);
      if (peer) peer.cap = record.cap === null ? null : { ...record.cap };
      return;
    }
    case 'susp': {
      const peer = state.peers.get(record.k);
      if (peer) peer.suspended = record.s;
      return;
    }
    case 'usage':
      for (const [key, used] of Object.entries(record.u)) {
        const cap = state.peers.get(key)?.cap;
        if (cap) cap.usedBytes = used;
      }
      return;
    case 'exh':
      if (record.at === null || record.q === undefined) state.exhausted?.delete(record.k);
      else if (state.peers.has(record.k)) {
        state.exhausted ??= new Map();
        state.exhausted.set(record.k, { quotaBytes: record.q, at: record.at });
      }
      return;
  }
}

/** A peer as one whole record. */
export function peerRecord(peer: SavedPeer): JournalRecord {
  return {
    t: 'peer',
    k: peer.publicKey,
    ips: [...peer.allowedIps],
    limit: peer.limit,
    cap: peer.cap === null ? null : { ...peer.cap },
    ...(peer.suspended === true ? { s: true as const } : {}),
  };
}

/** The shortest list of records that replays to `state`. */
export function compactRecords(state: SavedState): JournalRecord[] {
  const records: JournalRecord[] = [];
  if (state.boot) records.push({ t: 'boot', ...state.boot });
  if (state.iface) records.push({ t: 'iface', ...state.iface });
  for (const peer of state.peers.values()) records.push(peerRecord(peer));
  for (const [k, ips] of state.intents) records.push({ t: 'intent', k, ips: [...ips] });
  for (const [k, e] of state.exhausted ?? []) {
    if (state.peers.has(k)) records.push({ t: 'exh', k, q: e.quotaBytes, at: e.at });
  }
  return records;
}

export function encodeRecord(record: JournalRecord): string {
  const json = JSON.stringify(record);
  return `${crc32(json).toString(16).padStart(8, '0')} ${json}\n`;
}

export class JournalCorruptError extends Error {
  constructor(
    readonly line: number,
    reason: string,
  ) {
    super(`line ${line} is damaged (${reason}) and good lines follow it`);
    this.name = 'JournalCorruptError';
  }
}

export interface DecodedJournal {
  records: JournalRecord[];
  /** Bytes of the good records: where a torn tail starts. */
  goodLength: number;
  /** A torn last line that was dropped (never acknowledged). */
  tornTail: boolean;
}

const RECORD_TYPES = new Set([
  'boot',
  'iface',
  'intent',
  'peer',
  'abort',
  'del',
  'limit',
  'cap',
  'susp',
  'usage',
  'exh',
]);

/** Why a line is no record, or null when it is one. */
function lineFault(line: string): string | null {
  const match = /^([0-9a-f]{8}) (.*)$/s.exec(line);
  if (!match) return 'no checksum';
  if (crc32(match[2]).toString(16).padStart(8, '0') !== match[1]) return 'checksum mismatch';
  let value: unknown;
  try {
    value = JSON.parse(match[2]);
  } catch {
    return 'not JSON';
  }
  if (typeof value !== 'object' || value === null || !('t' in value)) return 'not a record';
  if (!RECORD_TYPES.has(String(value.t))) return `unknown record ${String(value.t)}`;
  return null;
}

/**
 * The records of a journal's bytes. A bad or unterminated LAST line is a torn write and is
 * dropped; a bad line followed by any good one is damage: JournalCorruptError.
 */
export function decodeJournal(bytes: Buffer): DecodedJournal {
  const text = bytes.toString('utf8');
  const records: JournalRecord[] = [];
  let offset = 0;
  let goodLength = 0;
  let bytesBefore = 0;
  let lineNo = 0;
  let badLine: { line: number; reason: string } | null = null;
  while (offset < text.length) {
    lineNo++;
    const end = text.indexOf('\n', offset);
    const line = end === -1 ? text.slice(offset) : text.slice(offset, end);
    const fault = end === -1 ? 'no line end' : lineFault(line);
    if (fault !== null) {
      badLine ??= { line: lineNo, reason: fault };
    } else {
      if (badLine !== null) throw new JournalCorruptError(badLine.line, badLine.reason);
      records.push(JSON.parse(line.slice(9)) as JournalRecord);
      goodLength = bytesBefore + Buffer.byteLength(line, 'utf8') + 1;
    }
    if (end === -1) break;
    bytesBefore += Buffer.byteLength(line, 'utf8') + 1;
    offset = end + 1;
  }
  return { records, goodLength, tornTail: badLine !== null };
}

export function replay(records: readonly JournalRecord[]): SavedState {
  const state = emptyState();
  for (const record of records) applyRecord(state, record);
  return state;
}
