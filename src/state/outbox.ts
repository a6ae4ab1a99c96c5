/**
 * The webhook outbox (issue 30): `DIR/<interface>/outbox`, the deliveries not yet answered 2xx
 * nor given up, so a restart, a kill -9 or a power cut delivers each of them once more.
 *
 * Contract: `add(entry)` resolves once the entry is on disk (written and fdatasync'd, in a batch
 * closed by a commit marker, the journal's line format: records.ts); adds and removals that
 * arrive during a flush share the next one (group commit). `remove(target, id)` writes a
 * tombstone the same way. Memory (`pending`, `stats`) changes only once a record is on disk, so
 * it is always what a restart would read, give or take records a crash left unsynced: reading,
 * every line whose checksum holds counts, wherever it lies (an add in a torn batch is an event
 * delivered once more, a tombstone there one answered 2xx: both true), and a line that does not
 * (a cut write, a page of zeros) is skipped and counted in `damaged`. No entry is ever lost that
 * an `add` resolved for, short of a removal. A write that fails rejects its batch and cuts the
 * file back; if the cut fails too, the next write first rewrites the file from memory. The file
 * is compacted (the pending adds only, a new file renamed over the old one, no `.prev` kept) at
 * open and when it has grown past COMPACT_GROWTH times that: batch-file.ts's machinery, shared
 * with the journal. A read-only file system (EROFS) loads what is there and rejects every write
 * (StateReadOnlyError). What an entry holds is opaque here: the events room decides
 * (src/events/webhooks.ts); nothing here knows HTTP.
 */
import { BatchFile } from './batch-file';
import { checkedLine, encodeBatch } from './records';
import type { StateFs } from './files';

export const OUTBOX_FILE = 'outbox';
/** It holds events' payloads (peers' keys and addresses): the daemon's alone. */
export const OUTBOX_MODE = 0o600;

/** One pending delivery: an event for one target. */
export interface OutboxEntry {
  /** The target's key (the events room's, never its URL or secret). */
  target: string;
  /** The event id: the `webhook-id` of every attempt. */
  id: string;
  type: string;
  /** The body, exactly as first sent. */
  json: string;
  /** When it was queued, ms since the epoch (its retry window counts from here). */
  queuedAt: number;
}

type OutboxRecord =
  | { t: 'add'; g: string; id: string; ty: string; q: number; b: string }
  | { t: 'done'; g: string; id: string };

/** Per target: entries pending and when the oldest was queued. */
export interface OutboxDepth {
  depth: number;
  oldestAt: number;
}

export interface OutboxOpened {
  outbox: Outbox;
  /** Lines skipped at open because their checksum failed (a write a crash cut). */
  damaged: { lines: number; bytes: number } | null;
}

/** The outbox file cannot be used as it is (a symbolic link, readable by others). */
export class OutboxFileError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'OutboxFileError';
  }
}

function isRecord(value: unknown): value is OutboxRecord {
  if (typeof value !== 'object' || value === null) return false;
  const r = value as Record<string, unknown>;
  if (typeof r.g !== 'string' || typeof r.id !== 'string') return false;
  if (r.t === 'done') return true;
  return (
    r.t === 'add' && typeof r.ty === 'string' && typeof r.b === 'string' && Number.isFinite(r.q)
  );
}

/** Every record whose line's checksum holds, in file order; the rest counted. */
export function decodeOutbox(bytes: Buffer): {
  records: OutboxRecord[];
  seq: number | null;
  damaged: { lines: number; bytes: number } | null;
} {
  const records: OutboxRecord[] = [];
  let seq: number | null = null;
  let bad = 0;
  let badBytes = 0;
  let start = 0;
  while (start < bytes.length) {
    const newline = bytes.indexOf(0x0a, start);
    const end = newline === -1 ? bytes.length : newline;
    const line = bytes.subarray(start, end);
    const value = newline === -1 ? null : checkedLine(bytes, start, end).value;
    const marker = value as { t?: unknown; seq?: unknown } | null;
    if (marker?.t === 'commit' && Number.isSafeInteger(marker.seq)) seq = marker.seq as number;
    else if (isRecord(value)) records.push(value);
    else if (line.some((byte) => byte !== 0)) {
      bad++;
      badBytes += end - start + (newline === -1 ? 0 : 1);
    }
    start = end + 1;
  }
  return { records, seq, damaged: bad === 0 ? null : { lines: bad, bytes: badBytes } };
}

const keyOf = (target: string, id: string): string => `${target} ${id}`;

export class Outbox {
  /** Every pending entry, in the order it was queued. */
  private readonly entries = new Map<string, OutboxEntry>();
  /** Per target, its entries in the order queued (the first is the oldest). */
  private readonly byTarget = new Map<string, Map<string, OutboxEntry>>();
  private readonly file: BatchFile<OutboxRecord>;

  private constructor(
    fs: StateFs,
    readonly path: string,
    seq: number | null,
  ) {
    this.file = new BatchFile<OutboxRecord>(
      fs,
      path,
      {
        apply: (record) => this.apply(record),
        // The pending adds only: a compaction drops every answered entry and its tombstone.
        snapshot: () =>
          this.pending().map((e) => ({
            t: 'add',
            g: e.target,
            id: e.id,
            ty: e.type,
            q: e.queuedAt,
            b: e.json,
          })),
        encode: encodeBatch,
        mode: OUTBOX_MODE,
        keepPrevious: false,
      },
      seq,
    );
  }

  /**
   * Reads `file` (absent: empty), refusing a symbolic link or a file others may read, and
   * rewrites it compacted; EROFS leaves it as it is and makes the outbox read-only.
   */
  static async open(fs: StateFs, file: string): Promise<OutboxOpened> {
    const info = await fs.stat(file);
    if (info !== null && info.kind !== 'file') {
      throw new OutboxFileError(
        `outbox ${file} is a ${info.kind === 'symlink' ? 'symbolic link' : info.kind}, not a file; it is never followed. Move it aside`,
      );
    }
    if (info !== null && (info.mode & 0o077) !== 0) {
      throw new OutboxFileError(
        `outbox ${file} has mode 0${(info.mode & 0o777).toString(8)}: group and others must have no access (it holds events naming peers); run: chmod go= ${file}`,
      );
    }
    const decoded = decodeOutbox((await fs.read(file)) ?? Buffer.alloc(0));
    const outbox = new Outbox(fs, file, decoded.seq);
    for (const record of decoded.records) outbox.apply(record);
    await outbox.file.open();
    return { outbox, damaged: decoded.damaged };
  }

  /** Why the outbox takes no writes (EROFS), or null. */
  get readOnly(): string | null {
    return this.file.readOnly;
  }

  /** Every pending entry, in the order queued. */
  pending(): OutboxEntry[] {
    return [...this.entries.values()];
  }

  /** Per target key: how many entries are pending and when the oldest was queued. */
  stats(): Map<string, OutboxDepth> {
    const stats = new Map<string, OutboxDepth>();
    for (const [target, entries] of this.byTarget) {
      const oldest = entries.values().next().value;
      if (oldest !== undefined)
        stats.set(target, { depth: entries.size, oldestAt: oldest.queuedAt });
    }
    return stats;
  }

  /** Disk flushes since open (the group commit's measure). */
  get flushCount(): number {
    return this.file.flushes;
  }

  /** Resolves once the entry is on disk. */
  add(entry: OutboxEntry): Promise<void> {
    if (this.file.closed) return Promise.reject(new Error(`the outbox ${this.path} is closed`));
    const { target, id, type, json, queuedAt } = entry;
    return this.enqueue({ t: 'add', g: target, id, ty: type, q: queuedAt, b: json });
  }

  /** Delivered or given up: a tombstone, on disk when this resolves (nothing for an unknown entry). */
  remove(target: string, id: string): Promise<void> {
    if (this.file.closed || !this.entries.has(keyOf(target, id))) return Promise.resolve();
    return this.enqueue({ t: 'done', g: target, id });
  }

  /** Waits for every write asked so far, then closes the file; a later add rejects, a later removal is dropped. */
  close(): Promise<void> {
    return this.file.close();
  }

  private enqueue(record: OutboxRecord): Promise<void> {
    if (this.file.closed) return Promise.resolve();
    return this.file.append([record]);
  }

  private apply(record: OutboxRecord): void {
    const key = keyOf(record.g, record.id);
    if (record.t === 'add') {
      const entry: OutboxEntry = {
        target: record.g,
        id: record.id,
        type: record.ty,
        json: record.b,
        queuedAt: record.q,
      };
      this.entries.set(key, entry);
      let target = this.byTarget.get(record.g);
      if (target === undefined) {
        target = new Map();
        this.byTarget.set(record.g, target);
      }
      target.set(record.id, entry);
    } else {
      this.entries.delete(key);
      const target = this.byTarget.get(record.g);
      target?.delete(record.id);
      if (target?.size === 0) this.byTarget.delete(record.g);
    }
  }
}
