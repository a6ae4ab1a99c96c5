/**
 * The journal file: records appended in batches with group commit, and compaction by atomic
 * replace.
 *
 * Contract: `append(records)` resolves once the records are on disk (written and fdatasync'd, as
 * a batch closed by its commit marker, records.ts), and only then are they applied to `state`, so
 * `state` is always exactly what a restart would read. Appends that arrive while a flush is under
 * way wait for the next one and share it: fifty concurrent writes cost a handful of disk flushes,
 * not fifty. A write or flush that fails rejects every append of its batch, cuts the file back to
 * its last good length (no half batch stays to damage the next one) and leaves `state` as it was.
 *
 * Broken: when that cut-back fails too, the file's end is unknown, and no append is acknowledged
 * again until a compaction from `state` (the acknowledged records, in memory) has written a new
 * generation; each later append tries it first and rejects (JournalBrokenError) while it fails.
 *
 * Compaction rewrites the journal as the records of the current state in a new file
 * (`<name>.new`, O_EXCL|O_NOFOLLOW, fsync) renamed over the old one; the old generation stays
 * beside it as `<name>.prev` (a hard link made before). The append handle is swapped only once
 * the rename is durable (fsync of the directory) and the new file is open: appends wait for a
 * running compaction (it runs between batches), and a compaction that fails before its rename
 * leaves the old generation in use. One that fails after it (the directory's fsync, the reopen)
 * leaves the old handle on an orphaned inode: it is closed, and the journal is broken as above.
 *
 * Read-only: once the file system answers EROFS (at open, or to a write), every append rejects
 * with StateReadOnlyError and `replaceState` keeps the state in memory only.
 */
import path from 'node:path';
import { type AppendFile, type StateFs, errnoOf, keepAs, writeNewFile } from './files';
import {
  type JournalRecord,
  type SavedState,
  applyRecord,
  compactRecords,
  encodeBatch,
} from './records';

/** Journal files are the daemon's alone (they name every peer). */
export const JOURNAL_MODE = 0o600;
/** Compact once the file is this many times its compacted size (and at least COMPACT_MIN_BYTES). */
export const COMPACT_GROWTH = 4;
export const COMPACT_MIN_BYTES = 1 << 20;

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** The state directory's file system is read-only: nothing can be saved until it is writable. */
export class StateReadOnlyError extends Error {
  constructor(
    readonly dir: string,
    readonly reason: string,
  ) {
    super(
      `the state directory ${dir} is read-only (${reason}): the change cannot be saved. ` +
        'Repair its file system (fsck, then remount it read-write) and restart wg-peerd',
    );
    this.name = 'StateReadOnlyError';
  }
}

/** The journal's end is unknown after a failure: nothing is acknowledged until a compaction succeeds. */
export class JournalBrokenError extends Error {
  constructor(
    readonly journal: string,
    readonly broken: unknown,
    retried: unknown,
  ) {
    super(
      `the journal ${journal} could not be written back to a known end (${messageOf(broken)}); ` +
        `rewriting it from memory failed too (${messageOf(retried)}), the next change tries again`,
    );
    this.name = 'JournalBrokenError';
  }
}

interface Pending {
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
  /** Why no append may be acknowledged until a compaction succeeds; null: none. */
  private broken: unknown = null;
  /** Why the file system takes no writes (EROFS); null: it does. */
  private readOnlyReason: string | null = null;

  constructor(
    private readonly fs: StateFs,
    readonly path: string,
    /** The state the journal's records add up to; updated as records become durable. */
    readonly state: SavedState,
    /** The sequence number of the last batch on disk (null: none yet). */
    private seq: number | null = null,
  ) {}

  /**
   * Writes the journal afresh from `state` (keeping the previous file as `.prev` when there is
   * one) and opens it for appending. EROFS makes the journal read-only instead of failing.
   */
  async open(): Promise<void> {
    try {
      await this.compact();
    } catch (error) {
      if (!this.readOnlyAfter(error)) throw error;
    }
  }

  /** Why the journal takes no writes (its file system is read-only), or null. */
  get readOnly(): string | null {
    return this.readOnlyReason;
  }

  /** Why appends fail until a compaction succeeds (retried on the next append), or null. */
  get brokenBy(): unknown {
    return this.broken;
  }

  /** Makes the journal read-only (the state directory could not even be made). */
  setReadOnly(reason: string): void {
    this.readOnlyReason = reason;
  }

  append(...records: JournalRecord[]): Promise<void> {
    if (records.length === 0) return Promise.resolve();
    if (this.readOnlyReason !== null) {
      return Promise.reject(
        new StateReadOnlyError(path.dirname(path.dirname(this.path)), this.readOnlyReason),
      );
    }
    return new Promise<void>((resolve, reject) => {
      this.queue.push({ records, resolve, reject });
      this.flushing ??= this.flushLoop();
    });
  }

  /**
   * Makes `next` the journal's state: written as a new generation (compacted, atomic replace,
   * the old one kept as .prev) once every append before it is on disk. Read-only: in memory only.
   */
  async replaceState(next: SavedState): Promise<void> {
    while (this.flushing) await this.flushing;
    this.state.boot = next.boot;
    this.state.iface = next.iface;
    this.state.peers = next.peers;
    this.state.intents = next.intents;
    if (this.readOnlyReason !== null) return;
    await this.compact();
  }

  /**
   * Applies a record to the state in memory only (an undo whose write failed: the journal on disk
   * holds a change the kernel refused), and marks the journal broken, so the state is written
   * whole (a compaction from memory) before any later append, starting now. Until that
   * compaction is on disk a crash may bring the refused change back.
   */
  amend(record: JournalRecord): void {
    applyRecord(this.state, record);
    if (this.readOnlyReason !== null) return;
    this.broken ??= new Error('an undoing record could not be written');
    this.flushing ??= this.compact()
      .catch(() => undefined)
      .then(() => this.flushLoop());
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
          // A compaction that fails before its rename leaves the old journal in use, which is
          // still good; one that fails after it marks the journal broken (the next append retries).
          await this.compact().catch(() => undefined);
        }
      }
    } finally {
      this.flushing = null;
    }
  }

  private rejectAll(batch: Pending[], error: unknown): void {
    for (const pending of batch) pending.reject(error);
  }

  private async flush(batch: Pending[]): Promise<void> {
    if (this.readOnlyReason !== null) {
      const dir = path.dirname(path.dirname(this.path));
      this.rejectAll(batch, new StateReadOnlyError(dir, this.readOnlyReason));
      return;
    }
    if (this.broken !== null || this.file === null) {
      const broken = this.broken ?? new Error(`${this.path} is not open`);
      try {
        await this.compact();
      } catch (error) {
        this.readOnlyAfter(error);
        this.rejectAll(batch, new JournalBrokenError(this.path, broken, error));
        return;
      }
    }
    const file = this.file!;
    const seq = this.seq === null ? 0 : this.seq + 1;
    const data = encodeBatch(
      batch.flatMap((p) => p.records),
      seq,
    );
    try {
      await file.write(data);
      await file.sync();
    } catch (error) {
      this.readOnlyAfter(error);
      try {
        await file.truncate(this.size);
      } catch (truncateError) {
        // The half batch may stay: a batch after it would be read as damage, or lost with it.
        this.broken = truncateError;
      }
      this.rejectAll(batch, error);
      return;
    }
    this.seq = seq;
    this.size += data.length;
    this.flushes++;
    for (const pending of batch) {
      this.appends++;
      for (const record of pending.records) applyRecord(this.state, record);
      pending.resolve();
    }
  }

  /** True (and the journal read-only from now on) when `error` is EROFS. */
  private readOnlyAfter(error: unknown): boolean {
    if (errnoOf(error) !== 'EROFS') return false;
    this.readOnlyReason ??= messageOf(error);
    return true;
  }

  private async compact(): Promise<void> {
    const seq = this.seq === null ? 0 : this.seq + 1;
    const data = encodeBatch(compactRecords(this.state), seq);
    // Before the rename, a failure leaves the old generation named and in use.
    if ((await this.fs.stat(this.path)) !== null) {
      await keepAs(this.fs, this.path, `${this.path}.prev`);
    }
    const temporary = await writeNewFile(this.fs, this.path, data, JOURNAL_MODE);
    await this.fs.rename(temporary, this.path);
    // From here the name is the new generation's: the old handle writes to an orphan (or
    // journal.prev), so it never takes another append.
    const previous = this.file;
    let opened: { file: AppendFile; size: number };
    try {
      await this.fs.syncDir(path.dirname(this.path));
      opened = await this.fs.openAppend(this.path);
    } catch (error) {
      this.file = null;
      this.broken = error;
      this.seq = seq;
      await previous?.close().catch(() => undefined);
      throw error;
    }
    this.file = opened.file;
    this.size = opened.size;
    this.compactedSize = opened.size;
    this.seq = seq;
    this.broken = null;
    await previous?.close().catch(() => undefined);
  }
}
