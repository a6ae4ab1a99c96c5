/**
 * Which slow parts of the list's kernel read to read again (issue 29). Every list read reads the
 * WireGuard device; the caps (the quota objects' dump with their used bytes, the caps maps) and
 * the configuration the daemon itself writes (the tc classes of the speed limits, the suspended
 * set) are read again only when `plan()` says so, and otherwise the last read of them is listed
 * again, its instant shown (`data_cap.read_at`). The caps are read again when (a) the daemon
 * changed anything (`changed('all')`, on the same path that ends the freshness window, so a list
 * that starts after a write always reads what the write did), (b) the kernel told of a change
 * (`changed('nftables')`: an nf_tables notification on the interface's tables, or lost
 * notifications; `changed('caps')`: a quota's exhaustion notice), or (c) their age nears
 * max(the window, COST_FACTOR × what the last caps read and its passes cost) (`heldMs`): under
 * back-to-back polls the caps then take about a COST_FACTORth of the time. The configuration
 * is read again on (a), on an nf_tables notification (the suspended set), and once about
 * max(CONFIG_SAFETY_MS, COST_FACTOR × its last cost) old, so a change behind the daemon's back
 * (a tc class, which sends no notification the daemon listens to) is noticed and repaired within
 * that bound. With a window of 0 (`--list-max-age 0`) every read reads everything, as before.
 * A change noticed while a read runs is not covered by that read: the counters are taken when a
 * read starts. No I/O; the clock is given (ms, monotonic).
 */

/**
 * K: the caps are read again no sooner than (K − 1) times what their read and passes last cost
 * (`heldMs`), so under back-to-back polls their share of the event loop is at most about
 * 1/(K − 1), a ninth (issue 29: A/C ≥ 0.9 leaves about a tenth to everything but serving). On a
 * host whose caps read costs under a tenth of the window they are read by every read, as before.
 */
export const COST_FACTOR = 10;

/** The configuration's safety cadence: drift behind the daemon's back is seen within this. */
export const CONFIG_SAFETY_MS = 15_000;

/** What made a part stale: the daemon's own change, an nf_tables notification, an exhaustion. */
export type Staleness = 'all' | 'nftables' | 'caps';

/** One read's plan: which slow parts it reads, and the change counters it covers. */
export interface ReadPlan {
  readonly caps: boolean;
  readonly config: boolean;
  /** The counters when the read started: a completed read covers changes up to these. */
  readonly capsSeen: number;
  readonly configSeen: number;
}

interface Last {
  /** Completion of the last read of the part, on the monotonic clock. */
  at: number;
  /** What it cost (read and passes), ms. */
  costMs: number;
  /** The change counter it covers. */
  seen: number;
}

export class UsageCadence {
  private capsChanges = 0;
  private configChanges = 0;
  private caps: Last | null = null;
  private config: Last | null = null;

  constructor(
    private readonly windowMs: number,
    private readonly now: () => number,
  ) {}

  /** Something changed what the slow parts read: see the contract for each kind. */
  changed(kind: Staleness): void {
    this.capsChanges += 1;
    if (kind !== 'caps') this.configChanges += 1;
  }

  /** Which slow parts a read starting now reads again. */
  plan(): ReadPlan {
    const capsSeen = this.capsChanges;
    const configSeen = this.configChanges;
    if (this.windowMs <= 0) return { caps: true, config: true, capsSeen, configSeen };
    const now = this.now();
    return {
      caps: this.due(this.caps, capsSeen, now, this.windowMs),
      config: this.due(this.config, configSeen, now, CONFIG_SAFETY_MS),
      capsSeen,
      configSeen,
    };
  }

  /** A read planned by `plan` completed; `costMs` what each part it read cost. */
  done(plan: ReadPlan, cost: { capsMs: number; configMs: number }): void {
    const at = this.now();
    if (plan.caps) this.caps = { at, costMs: cost.capsMs, seen: plan.capsSeen };
    if (plan.config) this.config = { at, costMs: cost.configMs, seen: plan.configSeen };
  }

  /** How old the caps' last read must be for a read to read them again (see `heldMs`). */
  capsHeldMs(): number {
    return this.caps === null ? 0 : this.heldMs(this.caps, this.windowMs);
  }

  private due(last: Last | null, changes: number, now: number, floorMs: number): boolean {
    if (last === null || changes !== last.seen) return true;
    return now - last.at >= this.heldMs(last, floorMs);
  }

  /**
   * A part is read again once max(floor, K × cost) − the window old: the read then serves it
   * for up to a window more, so nothing listed is much older than max(floor, K × cost), and on
   * a host where K × cost is under the window the caps are read by every read, as before. And
   * never sooner than (K − 1) × cost, so under back-to-back polls the part takes at most about
   * 1/(K − 1) of the time.
   */
  private heldMs(last: Last, floorMs: number): number {
    const bound = Math.max(floorMs, COST_FACTOR * last.costMs) - this.windowMs;
    return Math.max(bound, (COST_FACTOR - 1) * last.costMs);
  }
}
