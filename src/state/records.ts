/**
 * The journal's records and the state they add up to. A record is one line: eight hex digits of
 * the CRC-32 of the JSON text, a space, the JSON text, a newline. Records are written in batches
 * (one disk flush each), and each batch ends with a commit marker line (`{"t":"commit"}`: its
 * sequence number, byte length and record count). Replaying the records of a journal's whole
 * batches in order gives the saved state; a compacted journal is the shortest list of records
 * that gives the same state, as one batch. Pure: no I/O, no clock.
 *
 * Why batches with a marker: only the last batch can be unsynced when the power goes (the next
 * one is written after its flush returned), and a crash may leave it cut anywhere or with
 * zero-filled holes inside (XFS and ext4 leave zero pages in unsynced data): all of that lies
 * after the last whole batch and is a torn write, dropped. Damage with a whole batch after it is
 * damage, refused (see `decodeJournal`). Journals of before the markers (lines only) still load
 * by the old rule, and the start rewrites them in this format.
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
  /**
   * The peer's preshared key, base64 (issue 31), so that a reboot puts it back; absent: none.
   * The journal is mode 0600 in a 0700 directory, as the server key's file.
   */
  presharedKey?: string;
  /** The peer's name (issue 31); absent: none. */
  name?: string;
  /**
   * When the peer expires (issue 31), ms since the epoch; absent: never. A restore gives the
   * kernel's element the time left from then, none when it has passed (expired at once).
   */
  expiresAt?: number;
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
  /**
   * Deletes saved whose kernel side may not have ended (issue 28): a restart in the same boot
   * finishes each one the kernel still has. A delete leaves one until its kernel change is known
   * to have ended (`settleDelete`, memory only: the next compaction drops it); absent: none.
   */
  tombstones?: Set<string>;
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
      /** The preshared key (base64), present only for a peer with one (issue 31). */
      psk?: string;
      /** The name, present only for a named peer (issue 31). */
      n?: string;
      /** The expiry (ms since the epoch), present only for a peer with one (issue 31). */
      x?: number;
    }
  /** A create that failed in the kernel after its intent. */
  | { t: 'abort'; k: string }
  /**
   * A peer deleted. `done`: the kernel needs nothing more (it lost the peer already, or the
   * deletion is only memory put right); else a tombstone stays until the kernel's delete ended.
   */
  | { t: 'del'; k: string; done?: true }
  | { t: 'limit'; k: string; bps: number | null }
  | { t: 'cap'; k: string; cap: SavedCap | null }
  /** Suspended or resumed. */
  | { t: 'susp'; k: string; s: boolean }
  /** Named, renamed or its name cleared (null) (issue 31). */
  | { t: 'name'; k: string; n: string | null }
  /** Its expiry set or renewed (ms since the epoch), or cleared (null) (issue 31). */
  | { t: 'exp'; k: string; x: number | null }
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
      state.tombstones?.delete(record.k);
      state.intents.set(record.k, [...record.ips]);
      return;
    case 'peer':
      state.tombstones?.delete(record.k);
      state.intents.delete(record.k);
      state.peers.set(record.k, {
        publicKey: record.k,
        allowedIps: [...record.ips],
        limit: record.limit,
        cap: record.cap === null ? null : { ...record.cap },
        ...(record.s === true ? { suspended: true } : {}),
        ...(typeof record.psk === 'string' ? { presharedKey: record.psk } : {}),
        ...(typeof record.n === 'string' ? { name: record.n } : {}),
        ...(typeof record.x === 'number' ? { expiresAt: record.x } : {}),
      });
      return;
    case 'abort':
      state.intents.delete(record.k);
      return;
    case 'del':
      state.intents.delete(record.k);
      state.peers.delete(record.k);
      state.exhausted?.delete(record.k);
      if (record.done === true) state.tombstones?.delete(record.k);
      else (state.tombstones ??= new Set()).add(record.k);
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
    case 'exp': {
      const peer = state.peers.get(record.k);
      if (peer && typeof record.x === 'number') peer.expiresAt = record.x;
      else if (peer) delete peer.expiresAt;
      return;
    }
    case 'name': {
      const peer = state.peers.get(record.k);
      if (peer && typeof record.n === 'string') peer.name = record.n;
      else if (peer) delete peer.name;
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
    ...(peer.presharedKey === undefined ? {} : { psk: peer.presharedKey }),
    ...(peer.name === undefined ? {} : { n: peer.name }),
    ...(peer.expiresAt === undefined ? {} : { x: peer.expiresAt }),
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
  for (const k of state.tombstones ?? []) records.push({ t: 'del', k });
  return records;
}

/** One checksummed line: the CRC-32 of the JSON in hex, a space, the JSON, a newline. */
export function encodeLine(value: object): string {
  const json = JSON.stringify(value);
  return `${crc32(json).toString(16).padStart(8, '0')} ${json}\n`;
}

export function encodeRecord(record: JournalRecord): string {
  return encodeLine(record);
}

/**
 * The end of a batch: its sequence number (one more than the batch before it in the same file),
 * the byte length of its record lines before this one, and how many they are. A batch whose
 * marker is on disk whole, matching the bytes before it, was flushed whole (issue 28).
 */
export interface CommitMarker {
  t: 'commit';
  seq: number;
  len: number;
  n: number;
}

/**
 * Record lines and their commit marker: one flushed batch, or a whole compacted file (the
 * journal's, and the webhook outbox's with its own records).
 */
export function encodeBatch<R extends object>(records: readonly R[], seq: number): Buffer {
  const body = Buffer.from(records.map(encodeLine).join(''), 'utf8');
  const marker: CommitMarker = { t: 'commit', seq, len: body.length, n: records.length };
  return Buffer.concat([body, Buffer.from(encodeLine(marker), 'utf8')]);
}

/** Damage with acknowledged records after it: the start refuses (the operator salvages). */
export class JournalCorruptError extends Error {
  constructor(
    /** Byte offset of the first damaged byte's line. */
    readonly offset: number,
    readonly line: number,
    readonly reason: string,
  ) {
    super(
      `byte offset ${offset} (line ${line}) is damaged (${reason}) and acknowledged records ` +
        'follow it',
    );
    this.name = 'JournalCorruptError';
  }
}

export interface TornTail {
  /** Bytes dropped after the last whole batch. */
  bytes: number;
  /** Record lines among them whose checksum held (never acknowledged: their batch is not whole). */
  records: number;
}

export interface DecodedJournal {
  records: JournalRecord[];
  /** Bytes of the whole batches: where a torn tail starts. */
  goodLength: number;
  /** What was dropped after the last whole batch (a write a crash cut), or null. */
  tornTail: TornTail | null;
  /** The last batch's sequence number; null in an empty journal or one of the old format. */
  seq: number | null;
  /** Written before commit markers existed (issue 28): lines only. */
  legacy: boolean;
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
  'name',
  'exp',
  'usage',
  'exh',
]);

/** One line of a journal's bytes: where it is, and what it holds or why it is no record. */
export interface JournalLine {
  start: number;
  /** After its newline (or the end of the bytes when it has none). */
  end: number;
  number: number;
  fault: string | null;
  value: JournalRecord | CommitMarker | null;
}

function isMarker(value: JournalLine['value']): value is CommitMarker {
  return value !== null && value.t === 'commit';
}

function isWholeNumber(value: unknown): value is number {
  return typeof value === 'number' && Number.isSafeInteger(value) && value >= 0;
}

/**
 * The JSON value of one checksummed line (`bytes` from `start` to its newline at `end`), or why
 * it has none. Works on bytes: a hole of zeros is not UTF-8 text.
 */
export function checkedLine(
  bytes: Buffer,
  start: number,
  end: number,
): { fault: string; value: null } | { fault: null; value: unknown } {
  const line = bytes.subarray(start, end);
  if (line.length < 9 || line[8] !== 0x20) return { fault: 'no checksum', value: null };
  const sum = line.subarray(0, 8).toString('latin1');
  if (!/^[0-9a-f]{8}$/.test(sum)) return { fault: 'no checksum', value: null };
  const json = line.subarray(9);
  if (crc32(json).toString(16).padStart(8, '0') !== sum) {
    return { fault: 'checksum mismatch', value: null };
  }
  try {
    return { fault: null, value: JSON.parse(json.toString('utf8')) as unknown };
  } catch {
    return { fault: 'not JSON', value: null };
  }
}

/** Why a line is no journal record, or its value. */
function decodeLine(
  bytes: Buffer,
  start: number,
  end: number,
): Pick<JournalLine, 'fault' | 'value'> {
  const checked = checkedLine(bytes, start, end);
  if (checked.fault !== null) return { fault: checked.fault, value: null };
  const value = checked.value;
  if (typeof value !== 'object' || value === null || !('t' in value)) {
    return { fault: 'not a record', value: null };
  }
  if (value.t === 'commit') {
    const marker = value as Partial<CommitMarker>;
    if (!isWholeNumber(marker.seq) || !isWholeNumber(marker.len) || !isWholeNumber(marker.n)) {
      return { fault: 'a commit marker without its sequence, length and count', value: null };
    }
    return { fault: null, value: marker as CommitMarker };
  }
  if (!RECORD_TYPES.has(String(value.t)))
    return { fault: `unknown record ${String(value.t)}`, value: null };
  return { fault: null, value: value as JournalRecord };
}

/** Every line of a journal's bytes, good or not. */
export function journalLines(bytes: Buffer): JournalLine[] {
  const lines: JournalLine[] = [];
  let start = 0;
  while (start < bytes.length) {
    const newline = bytes.indexOf(0x0a, start);
    const end = newline === -1 ? bytes.length : newline + 1;
    const decoded =
      newline === -1 ? { fault: 'no line end', value: null } : decodeLine(bytes, start, newline);
    lines.push({ start, end, number: lines.length + 1, ...decoded });
    start = end;
  }
  return lines;
}

/**
 * The valid prefix of a journal: the records of its whole batches (of its good lines before the
 * first bad one, for the old format), where the prefix ends, and the first bad line after it.
 */
export interface ValidPrefix {
  records: JournalRecord[];
  length: number;
  seq: number | null;
  legacy: boolean;
  /** The first line that breaks the prefix, with why; null when the prefix runs to the end. */
  broken: { line: JournalLine; reason: string } | null;
  lines: JournalLine[];
  /** Index in `lines` of the first line after the prefix. */
  next: number;
}

export function validPrefix(bytes: Buffer): ValidPrefix {
  const lines = journalLines(bytes);
  // Journals of before issue 28 have no commit marker at all: every good line counts, up to the
  // first bad one. A journal of this format always has one (its compacted generation ends with
  // one), so a file without any is of the old format; the start rewrites it in the new one.
  const legacy = !lines.some((line) => isMarker(line.value));
  const records: JournalRecord[] = [];
  let batch: JournalRecord[] = [];
  let batchStart = 0;
  let seq: number | null = null;
  let length = 0;
  let next = 0;
  for (const [index, line] of lines.entries()) {
    if (line.fault !== null) {
      return { records, length, seq, legacy, broken: { line, reason: line.fault }, lines, next };
    }
    const value = line.value!;
    if (legacy) {
      records.push(value as JournalRecord);
      length = line.end;
      next = index + 1;
    } else if (isMarker(value)) {
      const fault =
        seq !== null && value.seq !== seq + 1
          ? `commit marker ${value.seq} follows ${seq}`
          : value.len !== line.start - batchStart || value.n !== batch.length
            ? `commit marker for ${value.n} records in ${value.len} bytes closes ${batch.length} in ${line.start - batchStart}`
            : null;
      if (fault !== null)
        return { records, length, seq, legacy, broken: { line, reason: fault }, lines, next };
      records.push(...batch);
      batch = [];
      batchStart = line.end;
      seq = value.seq;
      length = line.end;
      next = index + 1;
    } else {
      batch.push(value);
    }
  }
  return { records, length, seq, legacy, broken: null, lines, next };
}

/**
 * The records of a journal's bytes. Damage confined to the last batch (after the last whole one:
 * cut anywhere, holes of zeros, garbage; at most one commit marker in it, and no good line after
 * that marker) is a torn write: dropped, and said in `tornTail`. Anything else is damage before
 * the last batch: JournalCorruptError, naming where it starts. The first batch of a file (a
 * compacted generation, renamed into place only once on disk) is never torn.
 */
export function decodeJournal(bytes: Buffer): DecodedJournal {
  const prefix = validPrefix(bytes);
  const { records, length, seq, legacy, broken, lines, next } = prefix;
  const tail = lines.slice(next);
  const good = tail.filter((line) => line.fault === null);
  const tornTail: TornTail | null =
    tail.length === 0
      ? null
      : {
          bytes: bytes.length - length,
          records: good.filter((line) => !isMarker(line.value)).length,
        };
  if (broken === null) return { records, goodLength: length, tornTail, seq, legacy };
  const refuse = (): never => {
    throw new JournalCorruptError(broken.line.start, broken.line.number, broken.reason);
  };
  if (legacy) {
    // The old rule: a bad last line is torn, a bad line with a good one after it is damage.
    if (good.length > 0) refuse();
    return { records, goodLength: length, tornTail, seq, legacy };
  }
  if (length === 0) refuse();
  const marker = good.findIndex((line) => isMarker(line.value));
  if (marker !== -1 && marker < good.length - 1) refuse();
  return { records, goodLength: length, tornTail, seq, legacy };
}

export function replay(records: readonly JournalRecord[]): SavedState {
  const state = emptyState();
  for (const record of records) applyRecord(state, record);
  return state;
}
