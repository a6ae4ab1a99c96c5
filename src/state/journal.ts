/**
 * The journal file: records appended with group commit, and compaction by atomic replace.
 *
 * Contract: `append(records)` resolves once the records are on disk (written and fdatasync'd),
 * and only then are they applied to `state`, so `state` is always exactly what a restart would
 * read. Appends that arrive while a flush is under way wait for the next one and share it: fifty
 * concurrent writes cost a handful of disk flushes, not fifty. A write or flush that fails
 * rejects every append of its batch, cuts the file back to its last good length (no half record
 * stays to damage the next one) and leaves `state` as it was.
 *
 * Compaction rewrites the journal as the records of the current state (records.ts) in a new file
 * that replaces the old one atomically; the old generation stays beside it as `<name>.prev`
 * (a hard link made before the replace), so a damaged journal always has a good predecessor.
 * It runs between batches once the journal has grown to several times its compacted size.
 */
import type { AppendFile, StateFs } from './files';
import {
  type JournalRecord,
  type SavedState,
  applyRecord,
  compactRecords,
  encodeRecord,
} from './records';

/** Journal files are the daemon's alone (they name every peer). */
export const JOURNAL_MODE = 0o600;
/** Compact once the file is this many times its compacted size (and at least COMPACT_MIN_BYTES). */
export const COMPACT_GROWTH = 4;
export const COMPACT_MIN_BYTES = 1 << 20;

interface Pending {
  lines: string[];
  records: JournalRecord[];
  resolve: () => void;
  reject: (error: unknown) => void;
}

export interface JournalStats {
  /** Bytes in the journal file now. */
  bytes: number;
  /** Disk flushes (fdatasync) since open. */
  flushes: number;
  /** Record batches written since open (one per append call). */
  appends: number;
}

export class Journal {
  private file: AppendFile | null = null;
  private size = 0;
  private compactedSize = 0;
  private queue: Pending[] = [];
  private flushing: Promise<void> | null = null;
  private flushes = 0;
  private appends = 0;

  constructor(
    private readonly fs: StateFs,
    readonly path: string,
    /** The state the journal's records add up to; updated as records become durable. */
    readonly state: SavedState,
  ) {}

  /**
   * Writes the journal afresh from `state` (keeping the previous file as `.prev` when there is
   * one) and opens it for appending.
   */
  async open(): Promise<void> {
    await this.compact();
  }

  append(...records: JournalRecord[]): Promise<void> {
    if (records.length === 0) return Promise.resolve();
    return new Promise<void>((resolve, reject) => {
      this.queue.push({ lines: records.map(encodeRecord), records, resolve, reject });
      this.flushing ??= this.flushLoop();
    });
  }

  /**
   * Makes `next` the journal's state: written as a new generation (compacted, atomic replace,
   * the old one kept as .prev) once every append before it is on disk.
   */
  async replaceState(next: SavedState): Promise<void> {
    while (this.flushing) await this.flushing;
    this.state.boot = next.boot;
    this.state.iface = next.iface;
    this.state.peers = next.peers;
    this.state.intents = next.intents;
    await this.compact();
  }

  stats(): JournalStats {
    return { bytes: this.size, flushes: this.flushes, appends: this.appends };
  }

  /** Waits for every append made so far, then closes the file. */
  async close(): Promise<void> {
    while (this.flushing) await this.flushing;
    await this.file?.close();
    this.file = null;
  }

  private async flushLoop(): Promise<void> {
    try {
      while (this.queue.length > 0) {
        const batch = this.queue;
        this.queue = [];
        await this.flush(batch);
        if (this.size > Math.max(COMPACT_GROWTH * this.compactedSize, COMPACT_MIN_BYTES)) {
          // A failed compaction leaves the old journal in place, which is still good.
          await this.compact().catch(() => undefined);
        }
      }
    } finally {
      this.flushing = null;
    }
  }

  private async flush(batch: Pending[]): Promise<void> {
    const data = Buffer.from(batch.map((p) => p.lines.join('')).join(''), 'utf8');
    try {
      if (this.file === null) throw new Error(`${this.path} is not open`);
      await this.file.write(data);
      await this.file.sync();
    } catch (error) {
      await this.file?.truncate(this.size).catch(() => undefined);
      for (const pending of batch) pending.reject(error);
      return;
    }
    this.size += data.length;
    this.flushes++;
    for (const pending of batch) {
      this.appends++;
      for (const record of pending.records) applyRecord(this.state, record);
      pending.resolve();
    }
  }

  private async compact(): Promise<void> {
    const data = Buffer.from(compactRecords(this.state).map(encodeRecord).join(''), 'utf8');
    if ((await this.fs.mode(this.path)) !== null) {
      await this.fs.keep(this.path, `${this.path}.prev`);
    }
    await this.fs.replace(this.path, data, JOURNAL_MODE);
    const previous = this.file;
    const { file, size } = await this.fs.openAppend(this.path, JOURNAL_MODE);
    this.file = file;
    this.size = size;
    this.compactedSize = size;
    await previous?.close().catch(() => undefined);
  }
}
