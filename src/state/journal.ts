/**
 * The journal file: records appended in batches with group commit, and compaction by atomic
 * replace. The machinery is batch-file.ts's (shared with the webhook outbox); the journal gives it
 * the records of records.ts, its file mode, and keeps the old generation as `.prev`.
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
import type { StateFs } from './files';
import {
  BatchFile,
  COMPACT_GROWTH,
  COMPACT_MIN_BYTES,
  StateReadOnlyError,
  messageOf,
} from './batch-file';
import {
  type JournalRecord,
  type SavedState,
  applyRecord,
  compactRecords,
  encodeBatch,
} from './records';

export { COMPACT_GROWTH, COMPACT_MIN_BYTES, StateReadOnlyError };

/** Journal files are the daemon's alone (they name every peer). */
export const JOURNAL_MODE = 0o600;

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

/**
 * A batch whose write or flush failed, and whose cut-back and rewrite from memory failed too: it
 * may still be in the journal, so a restart could apply it.
 */
export class JournalUncertainError extends Error {
  constructor(
    readonly journal: string,
    readonly failed: unknown,
    readonly unknownEnd: unknown,
  ) {
    super(
      `writing the journal ${journal} failed (${messageOf(failed)}), and cutting the change back ` +
        `out of it failed too (${messageOf(unknownEnd)}): it may be saved`,
    );
    this.name = 'JournalUncertainError';
  }
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
  private readonly file: BatchFile<JournalRecord>;

  constructor(
    fs: StateFs,
    readonly path: string,
    /** The state the journal's records add up to; updated as records become durable. */
    readonly state: SavedState,
    /** The sequence number of the last batch on disk (null: none yet). */
    seq: number | null = null,
  ) {
    this.file = new BatchFile<JournalRecord>(
      fs,
      path,
      {
        apply: (record) => applyRecord(state, record),
        snapshot: () => compactRecords(state),
        encode: encodeBatch,
        mode: JOURNAL_MODE,
        keepPrevious: true,
        brokenError: (broken, retried) => new JournalBrokenError(path, broken, retried),
        uncertainError: (failed, unknownEnd) => new JournalUncertainError(path, failed, unknownEnd),
      },
      seq,
    );
  }

  /**
   * Writes the journal afresh from `state` (keeping the previous file as `.prev` when there is
   * one) and opens it for appending. EROFS makes the journal read-only instead of failing.
   */
  open(): Promise<void> {
    return this.file.open();
  }

  /** Why the journal takes no writes (its file system is read-only), or null. */
  get readOnly(): string | null {
    return this.file.readOnly;
  }

  /** Why appends fail until a compaction succeeds (retried on the next append), or null. */
  get brokenBy(): unknown {
    return this.file.brokenBy;
  }

  /** Makes the journal read-only (the state directory could not even be made). */
  setReadOnly(reason: string): void {
    this.file.setReadOnly(reason);
  }

  append(...records: JournalRecord[]): Promise<void> {
    return this.file.append(records);
  }

  /**
   * Makes `next` the journal's state: written as a new generation (compacted, atomic replace,
   * the old one kept as .prev) once every append before it is on disk. Read-only: in memory only.
   */
  replaceState(next: SavedState): Promise<void> {
    return this.file.replace(() => {
      this.state.boot = next.boot;
      this.state.iface = next.iface;
      this.state.peers = next.peers;
      this.state.intents = next.intents;
    });
  }

  /**
   * Applies a record to the state in memory only (an undo whose write failed: the journal on disk
   * holds a change the kernel refused), and marks the journal broken, so the state is written
   * whole (a compaction from memory) before any later append, starting now. Until that
   * compaction is on disk a crash may bring the refused change back.
   */
  amend(record: JournalRecord): void {
    applyRecord(this.state, record);
    this.file.rewriteBeforeNext('an undoing record could not be written');
  }

  stats(): JournalStats {
    return { bytes: this.file.size, flushes: this.file.flushes, appends: this.file.appends };
  }

  /** Waits for every append made so far, then closes the file. */
  close(): Promise<void> {
    return this.file.close();
  }
}
