/**
 * One append-only file of record batches with group commit, and compaction by atomic replace: the
 * machinery the journal (journal.ts) and the webhook outbox (outbox.ts) share. Its owner says what
 * differs: how a record is applied once durable, what records a compaction writes (the current
 * state, whole), how a batch is encoded, the file's mode, and whether the old generation is kept.
 *
 * Contract: `append(records)` resolves once the records are on disk (written and fdatasync'd, as
 * a batch closed by its commit marker, records.ts), and only then are they applied (the owner's
 * `apply`), so the owner's memory is always exactly what a restart would read. Appends that
 * arrive while a flush is under way wait for the next one and share it: fifty concurrent writes
 * cost a handful of disk flushes, not fifty. A write or flush that fails rejects every append of
 * its batch, cuts the file back to its last good length, durably (no half batch stays to damage
 * the next one, and a restart never reads a batch that was refused), and applies nothing.
 *
 * Broken: when that cut-back fails too, the file's end is unknown: a compaction from memory (the
 * acknowledged records) is tried at once; while none has succeeded, the failed batch may still be
 * in the file (its appends reject with the owner's `uncertainError`), and no append is
 * acknowledged; each later append tries the compaction first and rejects (the owner's
 * `brokenError`) while it fails.
 *
 * Compaction rewrites the file as the owner's `snapshot()` in a new file (`<name>.new`,
 * O_EXCL|O_NOFOLLOW, fsync) renamed over the old one; with `keepPrevious` the old generation
 * stays beside it as `<name>.prev` (a hard link made before). The append handle is swapped only
 * once the rename is durable (fsync of the directory) and the new file is open: appends wait for
 * a running compaction (it runs between batches), and a compaction that fails before its rename
 * leaves the old generation in use. One that fails after it (the directory's fsync, the reopen)
 * leaves the old handle on an orphaned inode: it is closed, and the file is broken as above. The
 * file is compacted at open and once it has grown past COMPACT_GROWTH times its compacted size
 * (and at least COMPACT_MIN_BYTES).
 *
 * Read-only: once the file system answers EROFS (at open, or to a write), every append rejects
 * with StateReadOnlyError, and `replace` changes memory only.
 */
import path from 'node:path';
import { type AppendFile, type StateFs, errnoOf, keepAs, writeNewFile } from './files';

/** Compact once the file is this many times its compacted size (and at least COMPACT_MIN_BYTES). */
export const COMPACT_GROWTH = 4;
export const COMPACT_MIN_BYTES = 1 << 20;

export function messageOf(error: unknown): string {
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

/** What a batch file's owner decides. */
export interface BatchFileOwner<R> {
  /** Applies one record, now durable, to the owner's memory. */
  apply(record: R): void;
  /** The records a compaction writes: the owner's current state, whole. */
  snapshot(): R[];
  /** Record lines and their commit marker with sequence number `seq`. */
  encode(records: readonly R[], seq: number): Buffer;
  /** The mode each new generation is created with. */
  mode: number;
  /** Whether a compaction keeps the old generation as `<name>.prev`. */
  keepPrevious: boolean;
  /** What an append rejects with while broken and the compaction retried failed (default: that failure). */
  brokenError?(broken: unknown, retried: unknown): unknown;
  /**
   * What the appends of a failed batch reject with when the batch may still be in the file (the
   * cut-back and the rewrite both failed: a restart could read it); default: the write's failure.
   */
  uncertainError?(failed: unknown, unknownEnd: unknown): unknown;
}

interface Pending<R> {
  records: R[];
  resolve: () => void;
  reject: (error: unknown) => void;
}

export class BatchFile<R> {
  private file: AppendFile | null = null;
  private bytes = 0;
  private compactedSize = 0;
  private queue: Pending<R>[] = [];
  private flushing: Promise<void> | null = null;
  private flushCount = 0;
  private appendCount = 0;
  /** Why no append may be acknowledged until a compaction succeeds; null: none. */
  private broken: unknown = null;
  /** Why the file system takes no writes (EROFS); null: it does. */
  private readOnlyReason: string | null = null;
  private isClosed = false;

  constructor(
    private readonly fs: StateFs,
    readonly path: string,
    private readonly owner: BatchFileOwner<R>,
    /** The sequence number of the last batch on disk (null: none yet). */
    private seq: number | null = null,
  ) {}

  /** Writes the file afresh (compaction) and opens it for appending; EROFS makes it read-only instead. */
  async open(): Promise<void> {
    try {
      await this.compact();
    } catch (error) {
      if (!this.readOnlyAfter(error)) throw error;
    }
  }

  /** Why the file takes no writes (its file system is read-only), or null. */
  get readOnly(): string | null {
    return this.readOnlyReason;
  }

  /** Why appends fail until a compaction succeeds (retried on the next append), or null. */
  get brokenBy(): unknown {
    return this.broken;
  }

  /** Bytes in the file now. */
  get size(): number {
    return this.bytes;
  }

  /** Disk flushes (fdatasync) since open. */
  get flushes(): number {
    return this.flushCount;
  }

  /** Appends acknowledged since open. */
  get appends(): number {
    return this.appendCount;
  }

  /** Whether `close` has run (appends are not refused here: the owner decides). */
  get closed(): boolean {
    return this.isClosed;
  }

  /** Makes the file read-only (its directory could not even be made). */
  setReadOnly(reason: string): void {
    this.readOnlyReason = reason;
  }

  append(records: R[]): Promise<void> {
    if (records.length === 0) return Promise.resolve();
    if (this.readOnlyReason !== null)
      return Promise.reject(this.readOnlyError(this.readOnlyReason));
    return new Promise<void>((resolve, reject) => {
      this.queue.push({ records, resolve, reject });
      this.flushing ??= this.flushLoop();
    });
  }

  /**
   * Once every append before it is on disk, runs `change` (the owner's memory) and writes it as a
   * new generation (compaction). Read-only: `change` runs, nothing is written.
   */
  async replace(change: () => void): Promise<void> {
    while (this.flushing) await this.flushing;
    change();
    if (this.readOnlyReason !== null) return;
    // The compaction holds the flush slot: an append made meanwhile waits for the new
    // generation, never written to the old one that the rename orphans.
    let release: () => void = () => undefined;
    this.flushing = new Promise<void>((resolve) => (release = resolve));
    try {
      await this.compact();
    } finally {
      this.flushing = null;
      release();
      if (this.queue.length > 0) this.flushing = this.flushLoop();
    }
  }

  /**
   * Marks the file broken (memory changed without a record on disk), so memory is written whole
   * (a compaction) before any later append, starting now. Read-only: nothing.
   */
  rewriteBeforeNext(reason: string): void {
    if (this.readOnlyReason !== null) return;
    this.broken ??= new Error(reason);
    this.flushing ??= this.compact()
      .catch(() => undefined)
      .then(() => this.flushLoop());
  }

  /** Waits for every append made so far, then closes the file. */
  async close(): Promise<void> {
    while (this.flushing) await this.flushing;
    this.isClosed = true;
    await this.file?.close();
    this.file = null;
  }

  private readOnlyError(reason: string): StateReadOnlyError {
    return new StateReadOnlyError(path.dirname(path.dirname(this.path)), reason);
  }

  private async flushLoop(): Promise<void> {
    try {
      while (this.queue.length > 0) {
        const batch = this.queue;
        this.queue = [];
        await this.flush(batch);
        if (this.bytes > Math.max(COMPACT_GROWTH * this.compactedSize, COMPACT_MIN_BYTES)) {
          // A compaction that fails before its rename leaves the old file in use, which is
          // still good; one that fails after it marks the file broken (the next append retries).
          await this.compact().catch(() => undefined);
        }
      }
    } finally {
      this.flushing = null;
    }
  }

  private rejectAll(batch: Pending<R>[], error: unknown): void {
    for (const pending of batch) pending.reject(error);
  }

  private async flush(batch: Pending<R>[]): Promise<void> {
    if (this.readOnlyReason !== null) {
      this.rejectAll(batch, this.readOnlyError(this.readOnlyReason));
      return;
    }
    if (this.broken !== null || this.file === null) {
      const broken = this.broken ?? new Error(`${this.path} is not open`);
      try {
        await this.compact();
      } catch (error) {
        this.readOnlyAfter(error);
        const owner = this.owner;
        this.rejectAll(batch, owner.brokenError ? owner.brokenError(broken, error) : error);
        return;
      }
    }
    const file = this.file!;
    const seq = this.seq === null ? 0 : this.seq + 1;
    const data = this.owner.encode(
      batch.flatMap((p) => p.records),
      seq,
    );
    try {
      await file.write(data);
      await file.sync();
    } catch (error) {
      this.readOnlyAfter(error);
      const unknownEnd = await this.cutBack(file);
      const owner = this.owner;
      this.rejectAll(
        batch,
        unknownEnd === null || !owner.uncertainError
          ? error
          : owner.uncertainError(error, unknownEnd),
      );
      return;
    }
    this.seq = seq;
    this.bytes += data.length;
    this.flushCount++;
    for (const pending of batch) {
      this.appendCount++;
      for (const record of pending.records) this.owner.apply(record);
      pending.resolve();
    }
  }

  /**
   * After a failed write or flush: cuts the file back to its last good length, durably, so the
   * failed batch is not in it even after a kill -9 (the page cache keeps what was written); when
   * that fails, rewrites the file from memory at once (a compaction). Answers null when the
   * failed batch is certainly gone, else why it may still be in the file (the file is broken).
   */
  private async cutBack(file: AppendFile): Promise<unknown> {
    try {
      await file.truncate(this.bytes);
      await file.sync();
      return null;
    } catch (error) {
      // The half batch may stay: a batch after it would be read as damage, or lost with it.
      this.broken = error;
    }
    try {
      await this.compact();
      return null;
    } catch (error) {
      this.readOnlyAfter(error);
      return error;
    }
  }

  /** True (and the file read-only from now on) when `error` is EROFS. */
  private readOnlyAfter(error: unknown): boolean {
    if (errnoOf(error) !== 'EROFS') return false;
    this.readOnlyReason ??= messageOf(error);
    return true;
  }

  private async compact(): Promise<void> {
    const seq = this.seq === null ? 0 : this.seq + 1;
    const data = this.owner.encode(this.owner.snapshot(), seq);
    // Before the rename, a failure leaves the old generation named and in use.
    if (this.owner.keepPrevious && (await this.fs.stat(this.path)) !== null) {
      await keepAs(this.fs, this.path, `${this.path}.prev`);
    }
    const temporary = await writeNewFile(this.fs, this.path, data, this.owner.mode);
    await this.fs.rename(temporary, this.path);
    // From here the name is the new generation's: the old handle writes to an orphan (or
    // <name>.prev), so it never takes another append.
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
    this.bytes = opened.size;
    this.compactedSize = opened.size;
    this.seq = seq;
    this.broken = null;
    await previous?.close().catch(() => undefined);
  }
}
