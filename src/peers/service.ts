/**
 * PeerService: the domain's face. Lists, creates and deletes the peers of one WireGuard
 * interface and sets or removes their speed limits, data caps and suspensions.
 *
 * Contract. The kernel is the store of every answer while the host is up: a list is one shared
 * read (./fresh-read.ts, DESIGN §5). Every change to an existing peer goes through the change
 * pipeline (./pipeline.ts: per peer, one change at a time, record → kernel → undo), creates
 * through ./creates.ts; each kernel change runs alone in the kernel's change queue and ends the
 * list's freshness window. What a read shows lost behind the daemon's back is noticed
 * (./drift.ts) and repaired on the next write; a committed peer a read no longer shows is
 * recorded as deleted (./behind-back.ts). The jobs live in their own files:
 * kernel calls (./kernel-calls.ts), drift and repair (./drift.ts), creates (./creates.ts), the
 * kernel side of each change (./peer-changes.ts), durable records (./pipeline.ts); this file
 * wires them and validates what callers ask.
 */
import type { ExhaustionTimes } from './exhaustion-times';
import { CleanupFailedError, PeerNotFoundError } from './errors';
import { parsePublicKey } from './keys';
import type { DataCap, KernelDataCap, LimitState } from '../kernel/types';
import { FreshRead } from './fresh-read';
import { UsageFence } from './usage-fence';
import { UsageCadence, type ReadPlan, type Staleness } from './usage-cadence';
import type { ListReads } from './checkpoint';
import { allInOrder } from './settled';
import type { UsageRead, KernelObserver, PeerSnapshot } from './snapshot';
import {
  type DataCapChange,
  type ResolvedCap,
  capToKeep,
  checkCapChange,
  checkInteger,
  resolveCapChange,
} from './cap-plan';
import { systemClock } from './period-scheduler';
import { PeriodResets } from './period-resets';
import { KernelCalls, messageOf } from './kernel-calls';
import { Drift } from './drift';
import { BehindBackDeletions } from './behind-back';
import { ChangePipeline, type PeerJournal } from './pipeline';
import { Creates } from './creates';
import { PeerChanges } from './peer-changes';
import { type CreateOptions, DEFAULT_CLIENT_DEFAULTS, checkCreateOptions } from './client-options';
import { PeerNames, checkName } from './names';
import { ExpiryTracker, parseExpiresAt } from './expiry';
import type {
  ChangedPeer,
  CreatedPeer,
  EventLogger,
  PeerServiceApi,
  PeerServiceOptions,
  ResetCap,
} from './contracts';

export type * from './contracts';

/** DESIGN §3: speed limit range in bytes per second, each direction. */
export const SPEED_LIMIT_MIN = 1_000;
export const SPEED_LIMIT_MAX = 1_000_000_000_000;
/** DESIGN §3: data cap range in bytes, both directions together. */
export const DATA_CAP_MIN = 1;
export const DATA_CAP_MAX = Number.MAX_SAFE_INTEGER;

/** The caps a snapshot was read with, for a usage checkpoint. */
function usageOf(snapshot: PeerSnapshot): UsageRead {
  if (snapshot.usage === undefined) throw new Error('the read kept no caps');
  return snapshot.usage;
}

/**
 * A cap change resolved against the journal's cap: the fields left out are given explicitly, as
 * the journal holds them (the kernel writes the same as for a field left out while it has them,
 * and puts them back whole when nft lost the cap).
 */
function keptFrom(saved: DataCap, resolved: ResolvedCap): ResolvedCap {
  return {
    quotaBytes: resolved.quotaBytes,
    plan: resolved.plan === undefined ? (saved.plan ?? null) : resolved.plan,
    afterCap: resolved.afterCap ?? { throttleBytesPerSecond: saved.throttleBytesPerSecond ?? null },
  };
}

/** The cap the state directory holds for a peer (what drift restores a lost cap from). */
function savedCapsOf(journal: PeerJournal | null): (publicKey: string) => DataCap | null {
  return (publicKey) => journal?.state.peers.get(publicKey)?.cap ?? null;
}

/** A slow part this read does not read again (./usage-cadence.ts). */
const NOT_READ = Promise.resolve(null);

/** The configuration the daemon writes, as a list read last read it (./usage-cadence.ts). */
interface ConfigPart {
  /** The read that read it, in the order reads started. */
  readonly serial: number;
  readonly limits: ReadonlyMap<string, LimitState>;
  readonly suspended: ReadonlyMap<string, string | null>;
}

/** The caps as a list read last read them, and what its passes made of them. */
interface CapsPart {
  readonly serial: number;
  /** The kernel's caps as read (drift, exhaustion and the checkpoints use these). */
  readonly kernelCaps: ReadonlyMap<string, KernelDataCap>;
  /** What the list shows: the kernel's caps plus lost ones as last seen (Drift.listedCaps). */
  readonly listed: ReadonlyMap<string, KernelDataCap>;
  readonly exhausted: ReadonlyMap<string, number> | undefined;
  readonly usage: UsageRead;
  /** When the read that read them completed, ms since the epoch (`data_cap.read_at`). */
  readonly readAt: number;
}

/** A kernel failure after which a delete needs no undo: the peer is gone either way. */
const deleteStands = (error: unknown): boolean =>
  error instanceof PeerNotFoundError || error instanceof CleanupFailedError;

export class PeerService implements PeerServiceApi {
  private readonly calls: KernelCalls;
  private readonly drift: Drift;
  private readonly pipeline: ChangePipeline;
  private readonly creates: Creates;
  private readonly changes: PeerChanges;
  private readonly snapshots: FreshRead<PeerSnapshot>;
  private readonly fence: UsageFence;
  private readonly periodResets: PeriodResets;
  private readonly journal: PeerJournal | null;
  /** The start's restore (options.ready). */
  private readonly started: Promise<unknown>;
  private loaded: Promise<unknown> | undefined;
  /** Peer names (issue 31), loaded from the journal once the restore is done. */
  private readonly names = new PeerNames();
  /** Peer expiries (issue 31), loaded with the names. */
  private readonly expiry: ExpiryTracker;
  private readonly log: EventLogger;
  private readonly now: () => number;
  private readonly observer: KernelObserver | undefined;
  private readonly exhaustion: ExhaustionTimes | undefined;
  /** Committed peers a read no longer shows: recorded as deleted (./behind-back.ts). */
  private readonly behindBack: BehindBackDeletions;
  /** Which slow parts each list read reads again (./usage-cadence.ts). */
  private readonly cadence: UsageCadence;
  private readonly monotonicNow: () => number;
  /** Reads started so far: a part read by an older read never replaces a newer one. */
  private reads = 0;
  private configPart: ConfigPart | null = null;
  private capsPart: CapsPart | null = null;

  constructor(options: PeerServiceOptions) {
    const ifname = options.interfaceName;
    this.log = options.logger;
    this.now = options.now ?? Date.now;
    this.observer = options.observer;
    this.exhaustion = options.exhaustion;
    this.journal = options.journal ?? null;
    this.started = options.ready ?? Promise.resolve();
    this.fence = options.usageFence ?? new UsageFence();
    const addresses6 = options.addresses6 ?? [];
    let drift: Drift | null = null;
    let behindBack: BehindBackDeletions | null = null;
    this.calls = new KernelCalls(
      options.kernel,
      ifname,
      addresses6.length > 0,
      options.observer,
      options.endpointHost ?? null,
      (device) => {
        behindBack?.home(device);
        drift?.noticeDevice(device);
      },
    );
    this.expiry = new ExpiryTracker(this.calls, this.log, this.now, options.events);
    this.drift = drift = new Drift(this.calls, this.log, savedCapsOf(this.journal));
    const kernelChange = <T>(task: () => Promise<T>): Promise<T> => this.change(task);
    this.pipeline = new ChangePipeline({
      journal: this.journal,
      fence: this.fence,
      kernelChange,
      log: this.log,
      ifname,
    });
    this.periodResets = new PeriodResets(
      options.periodClock ?? { ...systemClock, now: this.now },
      this.pipeline,
      this.log,
      ifname,
    );
    this.creates = new Creates({
      calls: this.calls,
      pipeline: this.pipeline,
      journal: this.journal,
      kernelChange,
      log: this.log,
      events: options.events,
      random: options.random,
      addresses6,
      clientDefaults: options.clientDefaults ?? DEFAULT_CLIENT_DEFAULTS,
      names: this.names,
      expiry: this.expiry,
    });
    this.changes = new PeerChanges({
      calls: this.calls,
      drift: this.drift,
      periods: this.periodResets.scheduler,
      events: options.events,
      log: this.log,
      now: this.now,
      onPeriodReset: options.onPeriodReset,
    });
    this.periodResets.bind(this.changes);
    this.behindBack = behindBack = new BehindBackDeletions({
      journal: this.journal,
      pipeline: this.pipeline,
      changes: this.changes,
      calls: this.calls,
      kernelChange,
      adds: () => this.creates.adds,
      log: this.log,
    });
    const windowMs = options.listMaxAgeMs ?? 0;
    this.monotonicNow = options.monotonicNow ?? performance.now.bind(performance);
    this.cadence = new UsageCadence(windowMs, this.monotonicNow);
    const read = async (): Promise<PeerSnapshot> => {
      await this.ready;
      return this.readSnapshot();
    };
    this.snapshots = new FreshRead(read, windowMs, this.monotonicNow);
  }

  /**
   * Settles once the start's restore is done and the names are loaded: the journal's, or
   * without a journal the kernel's (issue 31), read on first need (the first list or change).
   */
  private get ready(): Promise<unknown> {
    this.loaded ??= this.names
      .loadAfter(this.started, this.journal, () => this.kernelNames())
      .then(async (value) => {
        await this.expiry.load(this.journal);
        return value;
      });
    return this.loaded;
  }

  snapshot(): Promise<PeerSnapshot> {
    return this.snapshots.get();
  }

  /**
   * The kernel told of a change the daemon did not make (./usage-cadence.ts): an nf_tables
   * notification of another program's change, or lost notifications ('nftables': the caps and
   * the suspended set are read again by the next list read), or a quota's exhaustion notice
   * ('caps'). The freshness window is not ended: the next read after it reads them.
   */
  kernelNoticed(kind: Exclude<Staleness, 'all'>): void {
    this.cadence.changed(kind);
  }

  freshSnapshot(): PeerSnapshot | null {
    return this.snapshots.peek();
  }

  /**
   * The list's kernel reads as usage checkpoints ride on them (./checkpoint.ts): the caps of the
   * read at hand or of the next one to start, never a read of their own.
   */
  readonly listReads: ListReads = {
    atHand: () => this.snapshots.atHand()?.then(usageOf) ?? null,
    next: () => this.snapshots.next().then(usageOf),
    sinceLastRead: () => this.snapshots.sinceLastRead(),
  };

  /** A create body's options (issue 31): every one optional, none is today's peer. */
  async createPeer(options: CreateOptions = {}): Promise<CreatedPeer> {
    checkCreateOptions(options);
    if (options.expiresAt !== undefined) parseExpiresAt(options.expiresAt, this.now());
    return this.creates.create(options);
  }

  async deletePeer(publicKey: string): Promise<ChangedPeer> {
    const key = parsePublicKey(publicKey);
    return this.pipeline.run(key, 'delete', async () => ({
      arg: undefined,
      step: {
        kernel: async () => {
          const deleted = await this.changes.deletePeer(key);
          this.names.set(key, null);
          this.expiry.forget(key);
          return deleted;
        },
        undoAfter: (e) => !deleteStands(e),
      },
    }));
  }

  /**
   * The names the kernel keeps (issue 31), read once at start without a state directory: each
   * element's name goes to its owner's key (a peer at another address now keeps it; an element
   * whose owner is gone names no one and is removed when its address is given again). A kernel
   * that cannot answer (no nf_tables) leaves no names, said in a warn line.
   */
  private async kernelNames(): Promise<ReadonlyMap<string, string>> {
    const { calls } = this;
    try {
      const named = await calls.call('names', () => calls.kernel.names.listNames(calls.ifname));
      return new Map(named.map((n) => [n.publicKey, n.name]));
    } catch (error) {
      this.log.warn(
        { event: 'names_unread', interface: calls.ifname, error: messageOf(error) },
        `the peers' names could not be read from the kernel: ${messageOf(error)}`,
      );
      return new Map();
    }
  }

  /** The peer's name now (issue 31), or null: what events write as `name`. */
  nameOf(publicKey: string): string | null {
    return this.names.get(publicKey);
  }

  /**
   * Names the peer, renames it, or clears its name (null) (issue 31): in the kernel's names set
   * (the peer must be there: 404 otherwise; 409 without a tunnel address), and the journal's
   * with a state directory.
   */
  async setName(publicKey: string, name: string | null): Promise<ChangedPeer> {
    const key = parsePublicKey(publicKey);
    checkName(name);
    return this.pipeline.run(key, 'name', async () => ({
      arg: name,
      step: {
        kernel: async () => {
          const peer = await this.calls.refFor(key, 'name');
          await this.calls.call('names', () =>
            this.calls.kernel.names.setNames(this.calls.ifname, [{ peer, name }]),
          );
          this.names.set(key, name);
          return { publicKey: key, ip: peer.address };
        },
      },
    }));
  }

  /** Sets, renews or clears the peer's expiry (issue 31, ./expiry.ts), through the pipeline. */
  async setExpiry(publicKey: string, expiresAt: string | null): Promise<ChangedPeer> {
    const key = parsePublicKey(publicKey);
    const at = parseExpiresAt(expiresAt, this.now());
    return this.pipeline.run(key, 'expiry', async () => ({
      arg: at,
      step: { kernel: () => this.expiry.change(key, at) },
    }));
  }

  async setSpeedLimit(publicKey: string, bytesPerSecond: number): Promise<ChangedPeer> {
    const key = parsePublicKey(publicKey);
    checkInteger(bytesPerSecond, SPEED_LIMIT_MIN, SPEED_LIMIT_MAX, 'bytesPerSecond');
    return this.pipeline.run(key, 'limit', async () => ({
      arg: bytesPerSecond,
      step: { kernel: () => this.changes.setLimit(key, bytesPerSecond) },
    }));
  }

  async removeSpeedLimit(publicKey: string): Promise<ChangedPeer> {
    const key = parsePublicKey(publicKey);
    return this.pipeline.run(key, 'limit', async () => ({
      arg: null,
      step: { kernel: () => this.changes.removeLimit(key) },
    }));
  }

  async setDataCap(publicKey: string, change: number | DataCapChange): Promise<ChangedPeer> {
    const key = parsePublicKey(publicKey);
    const asked = typeof change === 'number' ? { quotaBytes: change } : change;
    if (asked.quotaBytes !== undefined) {
      checkInteger(asked.quotaBytes, DATA_CAP_MIN, DATA_CAP_MAX, 'quotaBytes');
    }
    checkCapChange(asked);
    const capAlone =
      asked.quotaBytes !== undefined && Object.keys(asked).every((field) => field === 'quotaBytes');
    return this.pipeline.run(key, 'cap', async (peer) => {
      // What a left-out field keeps. With a state directory that holds the cap: the journal's
      // plan and rate, given explicitly (they are the kernel's for every change the daemon
      // made, and the cap goes back whole even when nft lost it behind the daemon's back, before
      // or during this change). Else the kernel's cap (a read, nothing written; a cap alone
      // needs none). In this change's turn: no other change of the peer runs in between.
      const saved: DataCap | null = peer?.cap ?? null;
      const { quotaBytes, plan, afterCap } =
        saved !== null
          ? keptFrom(saved, resolveCapChange(saved, asked, this.now()))
          : capAlone && asked.quotaBytes !== undefined
            ? { quotaBytes: asked.quotaBytes, plan: undefined, afterCap: undefined }
            : resolveCapChange(
                await this.change(() => this.changes.currentCap(key)),
                asked,
                this.now(),
              );
      return {
        // The bytes counted stay as saved; the kernel keeps its own count across the change.
        arg: (latest) =>
          capToKeep({
            quotaBytes,
            usedBytes: latest?.usedBytes ?? 0,
            plan: plan === undefined ? latest?.plan : plan,
            throttleBytesPerSecond:
              afterCap !== undefined
                ? afterCap.throttleBytesPerSecond
                : (latest?.throttleBytesPerSecond ?? null),
          }),
        step: { kernel: () => this.changes.setCap(key, { quotaBytes, plan, afterCap }) },
      };
    });
  }

  async removeDataCap(publicKey: string): Promise<ChangedPeer> {
    const key = parsePublicKey(publicKey);
    return this.pipeline.run(key, 'cap', async () => ({
      arg: null,
      step: { kernel: () => this.changes.removeCap(key) },
    }));
  }

  /**
   * Suspends or resumes the peer in the kernel (src/kernel/suspension): key, addresses,
   * counters, limit and cap stay as they are.
   */
  async setSuspension(publicKey: string, suspended: boolean): Promise<ChangedPeer> {
    const key = parsePublicKey(publicKey);
    return this.pipeline.run(key, 'suspension', async () => ({
      arg: suspended,
      step: { kernel: () => this.changes.setSuspension(key, suspended) },
    }));
  }

  /**
   * Zeroes the usage of the peer's cap now, in the kernel, read and reset in one step; answers
   * the closing usage. A peer without a cap is a 409 (NoDataCapError).
   */
  async resetDataCap(publicKey: string): Promise<ResetCap> {
    const key = parsePublicKey(publicKey);
    return this.pipeline.run(key, 'reset', async () => ({
      arg: undefined,
      step: { kernel: () => this.changes.resetCap(key) },
    }));
  }

  /**
   * Starts the billing periods: the plans the kernel holds now go to the scheduler, which makes
   * at once any reset that fell due while the daemon was not running (logged as made late).
   * This is the start's one kernel read, the list's own (every read hands its plans to the
   * scheduler, readSnapshot): a list arriving while it runs, or within the freshness window
   * after it, is answered from it, so the first list after a start costs no read of its own
   * (issue 29: before, a caps dump of its own here, the slowest of all since no handle is known
   * yet, and with any plan a device dump too, then the list's read after them).
   */
  async startPeriods(): Promise<void> {
    await this.snapshots.get();
  }

  /** Stops the period scheduler (shutdown). */
  stopPeriods(): void {
    this.periodResets.scheduler.stop();
  }

  /**
   * Runs a change alone, and makes every later list read the kernel afresh: the freshness window
   * ends when the change ends, whether it succeeded or not (a failed change may have applied a
   * part). A loss the last list showed is repaired first, whatever the change.
   */
  private async change<T>(task: () => Promise<T>): Promise<T> {
    await this.ready;
    return this.calls.kernel.changes.run(async () => {
      try {
        await this.drift.repairDamage();
        return await task();
      } finally {
        this.cadence.changed('all');
        this.snapshots.invalidate();
      }
    });
  }

  /**
   * One list read: the device always; the caps and the configuration when the cadence says so
   * (./usage-cadence.ts), else as the last read read them. The passes over every cap (drift's,
   * the billing periods', the exhaustion times', the listed caps) run only on a read of the caps
   * or the configuration; on a device-only read the device is checked for a recreated interface
   * and for peers deleted behind the daemon's back.
   */
  private async readSnapshot(): Promise<PeerSnapshot> {
    const plan = this.cadence.plan();
    const readCaps = plan.caps || this.capsPart === null;
    const readConfig = plan.config || this.configPart === null;
    const serial = ++this.reads;
    const token = readCaps ? this.fence.token() : 0;
    const started = process.hrtime.bigint();
    const elapsed = (): number => Number(process.hrtime.bigint() - started) / 1e6;
    const addsAtStart = this.creates.adds;
    try {
      const { device, limits, caps, suspended } = await this.readParts(readCaps, readConfig);
      const readMs = elapsed();
      this.observer?.kernelRead(readMs, true);
      const takenAt = this.now();
      const startedAt = takenAt - readMs;
      const config =
        limits === null || suspended === null
          ? this.configPart!
          : this.keepConfig({ serial, limits: limits.value, suspended: suspended.value });
      const expiry = await this.expiry.read(device, takenAt);
      let capsPart = this.capsPart!;
      let passesFrom = this.monotonicNow();
      if (caps !== null || limits !== null) {
        this.drift.notice({
          device,
          limits: config.limits,
          caps: caps === null ? capsPart.kernelCaps : caps.value,
        });
      } else {
        this.drift.noticeDevice(device);
      }
      const passesMs = this.monotonicNow() - passesFrom;
      await this.behindBack.notice(device, addsAtStart);
      passesFrom = this.monotonicNow();
      if (caps !== null) {
        capsPart = this.keepCaps(device, {
          serial,
          caps: caps.value,
          usage: { caps: caps.value, token, startedAt },
          readAt: takenAt,
        });
      }
      this.cadenceDone(plan, readCaps, readConfig, {
        caps: caps?.ms ?? 0,
        config: Math.max(limits?.ms ?? 0, suspended?.ms ?? 0),
        passes: passesMs + (this.monotonicNow() - passesFrom),
      });
      // What the list and the metrics show: the kernel's caps, plus the caps of live peers that
      // the kernel lost behind the daemon's back, as last seen and not enforced.
      return {
        takenAt,
        readMs,
        device,
        limits: config.limits,
        caps: capsPart.listed,
        suspended: config.suspended,
        names: this.names.current,
        ...expiry,
        capsReadAt: capsPart.readAt,
        ...(capsPart.exhausted ? { exhausted: capsPart.exhausted } : {}),
        usage: capsPart.usage,
      };
    } catch (error) {
      this.observer?.kernelRead(elapsed(), false);
      throw error;
    }
  }

  /** The device, and the slow parts asked for (null: not read again), each with its cost. */
  private async readParts(readCaps: boolean, readConfig: boolean) {
    const { kernel, ifname } = this.calls;
    const optional = this.calls.optional.bind(this.calls);
    const timed = async <V>(read: () => Promise<V>): Promise<{ value: V; ms: number }> => {
      const from = this.monotonicNow();
      const value = await read();
      return { value, ms: this.monotonicNow() - from };
    };
    // The device first: its failure decides the answer (see allInOrder).
    const [device, limits, caps, suspended] = await allInOrder([
      this.calls.call('wireguard', () => kernel.wireguard.getDevice(ifname)),
      readConfig
        ? timed(() => optional('shaper', () => kernel.shaper.listLimits(ifname)))
        : NOT_READ,
      readCaps ? timed(() => optional('quota', () => kernel.quota.listCaps(ifname))) : NOT_READ,
      readConfig
        ? timed(() => optional('suspension', () => kernel.suspension.listSuspended(ifname)))
        : NOT_READ,
    ]);
    return { device, limits, caps, suspended };
  }

  /** A configuration just read, kept unless a read that started later kept its own. */
  private keepConfig(part: ConfigPart): ConfigPart {
    const kept = this.configPart;
    if (kept !== null && kept.serial > part.serial) return kept;
    this.configPart = part;
    return part;
  }

  /**
   * Caps just read: the passes over them (the billing periods, the exhaustion times, the
   * listed caps), kept unless a read that started later kept its own.
   */
  private keepCaps(
    device: Parameters<PeriodResets['schedule']>[0],
    read: {
      serial: number;
      caps: ReadonlyMap<string, KernelDataCap>;
      usage: UsageRead;
      readAt: number;
    },
  ): CapsPart {
    const kept = this.capsPart;
    if (kept !== null && kept.serial > read.serial) return kept;
    const { caps } = read;
    this.periodResets.schedule(device, caps);
    const exhausted = this.exhaustion?.read({
      caps,
      owners: this.drift.capOwners(caps),
      startedAt: read.usage.startedAt,
      takenAt: read.readAt,
    });
    const part: CapsPart = {
      serial: read.serial,
      kernelCaps: caps,
      listed: this.drift.listedCaps(caps),
      exhausted,
      usage: read.usage,
      readAt: read.readAt,
    };
    this.capsPart = part;
    return part;
  }

  /** Tells the cadence what the parts this read read cost, the passes with the caps'. */
  private cadenceDone(
    plan: ReadPlan,
    readCaps: boolean,
    readConfig: boolean,
    ms: { caps: number; config: number; passes: number },
  ): void {
    const done = { ...plan, caps: readCaps, config: readConfig };
    this.cadence.done(done, {
      capsMs: ms.caps + (readCaps ? ms.passes : 0),
      configMs: ms.config + (readCaps ? 0 : ms.passes),
    });
  }
}
