/**
 * The one way to change a peer (issue 28).
 *
 * Contract. Every change to one existing peer — delete, limit set or removed, cap set, removed or
 * reset, suspension, name, expiry, a billing-period reset, a deletion seen behind the daemon's back — runs
 * through `run(key, kind, ...)`, and the changes of one peer run one after the other, each whole
 * before the next begins:
 *
 *   1. record: what the journal must hold once the change is made, built from that peer's LATEST
 *      ACKNOWLEDGED state (the previous change of the peer has ended, so nothing of it is pending);
 *      the change waits for it to be on disk (a disk that fails makes it a 507 and nothing else
 *      happens);
 *   2. kernel: the kernel change, alone in the kernel layer's one change queue;
 *   3. undo: when the kernel refuses, a record that inverts exactly its own record (the peer's
 *      fields as they were before it), so the journal never holds what the kernel refused;
 *   4. after: for a change whose figures only the kernel knows (the closing usage of a period
 *      reset), a record written once the kernel side is known.
 *
 * Changes to different peers run in parallel: their records share the journal's group commits,
 * and their kernel changes queue in the kernel layer. A change of a peer's cap, or of the peer
 * itself, runs inside the usage fence (./usage-fence.ts), so no count read before it ends is
 * saved over its record. Without a state directory steps 1, 3 and 4 are skipped and the rest is
 * the same. What each kind records and undoes is the table `RECORDS` below; what it does in the
 * kernel is the caller's `kernel` function (./peer-changes.ts).
 */
import { JournalUncertainError, type SavedCap, type SavedPeer } from '../state';
import { StateUndoFailedError, StateWriteError, StateWriteUncertainError } from './errors';
import { messageOf } from './kernel-calls';
import type { EventLogger, PeerJournal } from './contracts';

export type { PeerJournal } from './contracts';
import type { UsageFence } from './usage-fence';

/** One kind of change: what it records and how that record is undone. */
interface RecordRule<A> {
  /** Runs inside the usage fence: it changes the peer's cap or the peer. */
  fenced: boolean;
  /** The record before the kernel change; null: nothing to record. */
  record(
    journal: PeerJournal,
    key: string,
    latest: SavedPeer | undefined,
    arg: A,
  ): Promise<void> | null;
  /** The record that gives back the peer's fields as `latest` had them. */
  undo(journal: PeerJournal, key: string, latest: SavedPeer | undefined): Promise<void> | null;
  /** Whether a kernel failure is undone; absent: always. */
  undoAfter?(error: unknown): boolean;
  /** Once the kernel change has ended well: what the journal may let go of (memory only). */
  settled?(journal: PeerJournal, key: string): void;
}

/** A cap as the journal keeps it across a change that sets it: the bytes counted stay. */
export type CapRecordArg = (latest: SavedCap | null) => SavedCap | null;

const keepPeer = (journal: PeerJournal, latest: SavedPeer | undefined): Promise<void> | null =>
  latest === undefined ? null : journal.recordPeers([latest]);

/** The table: each kind of change, its record and its undo. */
export const RECORDS = {
  /** A tombstone until the kernel's delete has ended: a restart finishes one cut off by a crash. */
  delete: {
    fenced: true,
    record: (journal, key) => journal.recordDelete(key),
    undo: (journal, _key, latest) => keepPeer(journal, latest),
    settled: (journal, key) => journal.settleDelete(key),
  } satisfies RecordRule<void>,
  limit: {
    fenced: false,
    record: (journal, key, _latest, bytesPerSecond: number | null) =>
      journal.recordLimit(key, bytesPerSecond),
    undo: (journal, key, latest) => journal.recordLimit(key, latest?.limit ?? null),
  } satisfies RecordRule<number | null>,
  cap: {
    fenced: true,
    record: (journal, key, latest, next: CapRecordArg | null) =>
      journal.recordCap(key, next === null ? null : next(latest?.cap ?? null)),
    undo: (journal, key, latest) => journal.recordCap(key, latest?.cap ?? null),
  } satisfies RecordRule<CapRecordArg | null>,
  /** A reset by the API: usage 0 (a peer without a cap records nothing and answers 409). */
  reset: {
    fenced: true,
    record: (journal, key, latest) =>
      latest?.cap ? journal.recordCap(key, { ...latest.cap, usedBytes: 0 }) : null,
    undo: (journal, key, latest) => journal.recordCap(key, latest?.cap ?? null),
  } satisfies RecordRule<void>,
  suspension: {
    fenced: false,
    record: (journal, key, _latest, suspended: boolean) => journal.recordSuspension(key, suspended),
    undo: (journal, key, latest) => journal.recordSuspension(key, latest?.suspended ?? false),
  } satisfies RecordRule<boolean>,
  /** A name set, changed or cleared (issue 31). */
  name: {
    fenced: false,
    record: (journal, key, _latest, name: string | null) => journal.recordName(key, name),
    undo: (journal, key, latest) => journal.recordName(key, latest?.name ?? null),
  } satisfies RecordRule<string | null>,
  /** An expiry set, renewed or cleared (issue 31), ms since the epoch or null. */
  expiry: {
    fenced: false,
    record: (journal, key, _latest, expiresAt: number | null) =>
      journal.recordExpiry(key, expiresAt),
    undo: (journal, key, latest) => journal.recordExpiry(key, latest?.expiresAt ?? null),
  } satisfies RecordRule<number | null>,
  /**
   * A deletion seen behind the daemon's back (`wg set … remove`): recorded as a delete would be,
   * when the peer is confirmed gone (`arg`) and the journal still holds it; never undone (the
   * kernel has already lost the peer; only its clean-up follows).
   */
  gone: {
    fenced: true,
    record: (journal, key, latest, gone: boolean) =>
      gone && latest !== undefined ? journal.recordGone(key) : null,
    undo: () => null,
    undoAfter: () => false,
  } satisfies RecordRule<boolean>,
};

export type ChangeKind = keyof typeof RECORDS;
type ArgOf<K extends ChangeKind> = Parameters<(typeof RECORDS)[K]['record']>[3];

export interface KernelStep<T> {
  /** The kernel change (run alone in the kernel's change queue). */
  kernel(): Promise<T>;
  /** Whether a kernel failure is undone; absent: the table's rule, else always. */
  undoAfter?(error: unknown): boolean;
  /** A record once the kernel side is known (an observation); a failure is only logged. */
  after?(journal: PeerJournal, result: T): Promise<void> | null;
}

export interface PipelineOptions {
  journal: PeerJournal | null;
  fence: UsageFence;
  /** Runs a kernel change alone (the service's change queue, with its repairs and window end). */
  kernelChange<T>(task: () => Promise<T>): Promise<T>;
  log: EventLogger;
  ifname: string;
}

export class ChangePipeline {
  /** Per peer: the end of its last change (never rejects): the next one starts after it. */
  private readonly tails = new Map<string, Promise<void>>();

  constructor(private readonly options: PipelineOptions) {}

  /** A copy of what the state directory holds for the peer (undefined without one). */
  latest(publicKey: string): SavedPeer | undefined {
    const peer = this.options.journal?.state.peers.get(publicKey);
    return peer === undefined ? undefined : structuredClone(peer);
  }

  /**
   * Runs one change of the peer `key` after every earlier change of it has ended. `plan` is
   * called when the change's turn has come, with the peer's latest acknowledged state; it may
   * read the kernel (through the change queue) to decide, and answers the record's argument
   * and the kernel step.
   */
  run<K extends ChangeKind, T>(
    key: string,
    kind: K,
    plan: (latest: SavedPeer | undefined) => Promise<{ arg: ArgOf<K>; step: KernelStep<T> }>,
  ): Promise<T> {
    const previous = this.tails.get(key) ?? Promise.resolve();
    const rule: RecordRule<ArgOf<K>> = RECORDS[kind] as RecordRule<ArgOf<K>>;
    const body = async (): Promise<T> => {
      const latest = this.latest(key);
      const { arg, step } = await plan(latest);
      return this.carry(key, rule, latest, arg, step);
    };
    const result = previous.then(() =>
      rule.fenced ? this.options.fence.around(key, body) : body(),
    );
    const tail = result.then(
      () => undefined,
      () => undefined,
    );
    this.tails.set(key, tail);
    void tail.then(() => {
      if (this.tails.get(key) === tail) this.tails.delete(key);
    });
    return result;
  }

  /** Whether a change of this peer is queued or running. */
  busy(key: string): boolean {
    return this.tails.has(key);
  }

  private async carry<A, T>(
    key: string,
    rule: RecordRule<A>,
    latest: SavedPeer | undefined,
    arg: A,
    step: KernelStep<T>,
  ): Promise<T> {
    const { journal, kernelChange } = this.options;
    if (journal === null) return kernelChange(() => step.kernel());
    const written = rule.record(journal, key, latest, arg);
    if (written !== null) await this.durable(written, 'nothing was changed');
    let result: T;
    try {
      result = await kernelChange(() => step.kernel());
    } catch (error) {
      const undo = step.undoAfter ?? rule.undoAfter ?? (() => true);
      if (written !== null && undo(error)) await this.undo(rule, journal, key, latest, error);
      throw error;
    }
    rule.settled?.(journal, key);
    const after = step.after?.(journal, result) ?? null;
    if (after !== null) {
      await after.catch((error: unknown) => this.notSaved(error, 'the kernel has the change'));
    }
    return result;
  }

  /**
   * Writes the record that inverts a refused change. When that write fails too, the journal on
   * disk holds what the kernel refused: the peer is put back in memory as it was (the journal
   * rewrites itself from memory before its next write) and the change answers 507
   * STATE_UNDO_FAILED instead of the kernel's refusal.
   */
  private async undo<A>(
    rule: RecordRule<A>,
    journal: PeerJournal,
    key: string,
    latest: SavedPeer | undefined,
    refused: unknown,
  ): Promise<void> {
    try {
      await rule.undo(journal, key, latest);
    } catch (undoError) {
      journal.amendPeer(key, latest);
      this.options.log.error(
        { event: 'state_undo_failed', interface: this.options.ifname, error: messageOf(undoError) },
        'the kernel refused a change, and saving its undoing in the state directory failed too',
      );
      throw new StateUndoFailedError(refused, undoError);
    }
  }

  /** Waits for a record to be on disk; a disk that fails it makes the change a 507. */
  async durable(written: Promise<void>, undone: string): Promise<void> {
    try {
      await written;
    } catch (error) {
      throw this.notSaved(error, undone);
    }
  }

  /**
   * The answer to a record the disk did not take: 507 STATE_WRITE_FAILED, or, when the record may
   * still be in the journal (its cut-back failed), 507 STATE_WRITE_UNCERTAIN.
   */
  notSaved(error: unknown, undone: string): StateWriteError | StateWriteUncertainError {
    const uncertain = error instanceof JournalUncertainError;
    this.options.log.error(
      {
        event: uncertain ? 'state_write_uncertain' : 'state_write_failed',
        interface: this.options.ifname,
        error: messageOf(error),
      },
      `saving a change in the state directory failed: ${messageOf(error)}; ${undone}`,
    );
    return uncertain ? new StateWriteUncertainError(error) : new StateWriteError(error, undone);
  }
}
