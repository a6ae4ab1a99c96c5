/**
 * What a case did and what the reboot found, and the check between them (Jepsen/Knossos style,
 * per peer and per field, which is enough here because every change names one peer).
 *
 * A history is the list of operations with the instant each was invoked and answered (one
 * counter over the whole case, so "before" is exact), and what each writes: a create writes the
 * peer's existence and its initial fields, a delete or a removal behind the daemon's back writes
 * its absence, a change writes one field (limit, cap quota, cap plan, suspension). Relative to
 * the crash an operation is answered (2xx before the crash), failed (an error before the crash)
 * or unanswered (in flight at the crash).
 *
 * The rules checked on the restored kernel (issue 28, Done when 1):
 * - A field holds the value of a write that was not certainly overwritten: an answered or
 *   unanswered write w such that no answered write of that field of that peer was invoked after w
 *   was answered; with no such write, the value before any. A write that failed is never a
 *   candidate: a change answered with an error is absent. So every answered change is present, no
 *   deleted peer is back, and a failed change left nothing.
 * - An unanswered change is whole or absent: a cap set with a plan shows its quota only with its
 *   plan (or the plan of a write that may have come after it).
 * - A reset answered is not undone: the bytes a cap shows are at most the bytes the kernel
 *   counted on it after the invocation of every answered reset.
 * - No two peers share an address; each peer has the address its create answered; no peer the
 *   daemon never answered is there, beyond the creates unanswered at the crash.
 * - A change answers only errors the SPEC names for it (507 when its record could not be
 *   written, 404, 409 for a reset without a cap).
 */
import {
  NoDataCapError,
  PeerNotFoundError,
  StateUndoFailedError,
  StateWriteUncertainError,
  StateWriteError,
  type CreatedPeer,
} from '../../../../src/peers';
import type { CommandKind } from './program';

export type Field = 'exists' | 'limit' | 'quota' | 'plan' | 'suspended' | 'expires';
export type Value = number | string | boolean | null;
const FIELDS: readonly Field[] = ['exists', 'limit', 'quota', 'plan', 'suspended', 'expires'];
/** Every field before a create, and the fields a create gives its peer. */
const BEFORE: Record<Field, Value> = {
  exists: false,
  limit: null,
  quota: null,
  plan: null,
  suspended: false,
  expires: null,
};

export interface Op {
  id: number;
  kind: CommandKind | 'list';
  /** The call as the trace prints it. */
  text: string;
  /** The peer it names; a create's once it answered (after the crash too: the drain tells it). */
  key: string | null;
  invokedAt: number;
  /** The instant it settled; null while it has not. */
  answeredAt: number | null;
  outcome: { ok: true; value: unknown } | { ok: false; error: unknown } | null;
  writes: Partial<Record<Field, Value>>;
  /** A removal behind the back: the list read after it, whose answer tells the removal. */
  toldBy?: Op;
  /** Bytes a usage command made the kernel count (0: the peer had no cap). */
  counted?: number;
}

export type Status = 'answered' | 'failed' | 'unanswered';

/** A peer as the rebooted kernel has it. */
export interface RestoredPeer {
  allowedIps: string[];
  limit: number | null;
  quota: number | null;
  plan: string | null;
  usedBytes: number | null;
  suspended: boolean;
  /** Its expiry in the kernel's sets (ms since the epoch), or null (issue 31). */
  expires: number | null;
}

export interface Restored {
  peers: Map<string, RestoredPeer>;
  /** The peers the journal holds after the restore: key → allowed IPs. */
  journal: Map<string, string[]>;
}

export class History {
  readonly ops: Op[] = [];
  /**
   * The first value id of this history: a later round's values continue after the rounds before,
   * so a limit or quota written in one round is never mistaken for the same number written in
   * another (the restored value of round 1 read as half of an unanswered change of round 2).
   */
  idBase = 0;
  private clock = 0;
  /** The instant of the crash; null before it. */
  crashedAt: number | null = null;
  private readonly names = new Map<string, string>();

  /**
   * A history that starts where a restore left the peers: each as if created with the values it
   * showed and answered, its counted bytes as counted before (the next round of a program).
   */
  static from(restored: Restored): History {
    const history = new History();
    for (const [key, peer] of restored.peers) {
      const at = history.tick();
      const ip = peer.allowedIps.find((cidr) => cidr.endsWith('/32'))?.split('/')[0] ?? null;
      const writes = {
        exists: true,
        limit: peer.limit,
        quota: peer.quota,
        plan: peer.plan,
        suspended: peer.suspended,
        expires: peer.expires,
      };
      history.ops.push({
        id: history.ops.length,
        kind: 'create',
        text: `restored → ${history.name(key)} ${ip}`,
        key,
        invokedAt: at,
        answeredAt: at,
        outcome: { ok: true, value: { publicKey: key, ip } },
        writes,
        ...(peer.usedBytes === null ? {} : { counted: peer.usedBytes }),
      });
    }
    return history;
  }

  tick(): number {
    return this.clock++;
  }

  /** A short stable name for a key in traces: P0, P1, ... in the order the keys became known. */
  name(key: string | null): string {
    if (key === null) return 'P?';
    let name = this.names.get(key);
    if (name === undefined) {
      name = `P${this.names.size}`;
      this.names.set(key, name);
    }
    return name;
  }

  invoke(
    kind: Op['kind'],
    text: string,
    key: string | null,
    writes: Op['writes'],
    call: () => Promise<unknown>,
  ): Op {
    const op: Op = {
      id: this.ops.length,
      kind,
      text,
      key,
      invokedAt: this.tick(),
      answeredAt: null,
      outcome: null,
      writes,
    };
    this.ops.push(op);
    call().then(
      (value) => {
        op.answeredAt = this.tick();
        op.outcome = { ok: true, value };
        if (kind === 'create') {
          op.key = (value as CreatedPeer).publicKey;
          op.text = `create → ${this.name(op.key)} ${(value as CreatedPeer).ip}`;
        }
      },
      (error: unknown) => {
        op.answeredAt = this.tick();
        op.outcome = { ok: false, error };
      },
    );
    return op;
  }

  settled(): boolean {
    return this.ops.every((op) => op.outcome !== null);
  }

  /** What the daemon did after the crash, as the trace and the violations say it. */
  after = 'the reboot';

  crash(restart = false): void {
    this.crashedAt = this.tick();
    if (restart) this.after = 'the restart';
  }

  /** When the operation's answer reached its caller; Infinity: not before the crash. */
  answered(op: Op): number {
    // 507 STATE_UNDO_FAILED and STATE_WRITE_UNCERTAIN say the change may be on disk until the
    // journal rewrites itself: like a change in flight at the crash, it may be present or absent.
    const error = op.outcome?.ok === false ? op.outcome.error : null;
    if (error instanceof StateUndoFailedError || error instanceof StateWriteUncertainError)
      return Infinity;
    const at = op.toldBy ? (op.toldBy.outcome?.ok ? op.toldBy.answeredAt : null) : op.answeredAt;
    const crash = this.crashedAt ?? Infinity;
    return at !== null && at < crash ? at : Infinity;
  }

  status(op: Op): Status {
    if (this.answered(op) === Infinity) return 'unanswered';
    return op.toldBy !== undefined || op.outcome?.ok ? 'answered' : 'failed';
  }

  /** The keys of creates answered before the crash, in the order they were answered. */
  known(): string[] {
    return this.ops
      .filter((op) => op.kind === 'create' && op.outcome?.ok && op.key !== null)
      .sort((a, b) => a.answeredAt! - b.answeredAt!)
      .map((op) => op.key!);
  }

  trace(restored: Restored | null): string {
    const lines = this.ops.map((op) => {
      const answer =
        op.toldBy !== undefined
          ? `told by #${op.toldBy.id}`
          : op.outcome === null
            ? 'never answered'
            : op.outcome.ok
              ? `2xx @${op.answeredAt}`
              : `${errorCode(op.outcome.error)} @${op.answeredAt}`;
      const key = op.kind === 'create' || op.key === null ? '' : ` ${this.name(op.key)}`;
      const counted = op.counted === undefined ? '' : ` (kernel +${op.counted})`;
      return `  #${op.id} @${op.invokedAt} ${op.text}${key}${counted}: ${answer} [${this.status(op)}]`;
    });
    lines.push(`  crash @${this.crashedAt}`);
    if (restored !== null) {
      for (const [key, peer] of restored.peers) {
        lines.push(
          `  after ${this.after}: ${this.name(key)} ${peer.allowedIps.join(',')} limit ${peer.limit} ` +
            `cap ${peer.quota}${peer.plan ? `/${peer.plan}` : ''} used ${peer.usedBytes} ` +
            `suspended ${peer.suspended} expires ${peer.expires}`,
        );
      }
    }
    return lines.join('\n');
  }

  /** Every rule of the contract above that the restored state breaks, as sentences. */
  check(restored: Restored): string[] {
    const violations: string[] = [];
    const keys = new Set<string>();
    for (const op of this.ops) if (op.key !== null) keys.add(op.key);
    for (const key of keys) this.checkPeer(key, restored.peers.get(key), violations);
    this.checkAddresses(restored, violations);
    this.checkErrors(violations);
    const inKernel = [...restored.peers.keys()].sort().join(' ');
    const inJournal = [...restored.journal.keys()].sort().join(' ');
    if (inKernel !== inJournal) {
      violations.push('after the restore the journal does not hold exactly the kernel’s peers');
    }
    return violations;
  }

  private writesOf(key: string, field: Field): Op[] {
    return this.ops.filter(
      (op) => op.key === key && field in op.writes && op.invokedAt < (this.crashedAt ?? Infinity),
    );
  }

  /** The values field may hold: the rule of certainly overwritten writes. */
  private candidates(key: string, field: Field): Set<Value> {
    const writes = this.writesOf(key, field);
    const answered = writes.filter((w) => this.status(w) === 'answered');
    const values = new Set<Value>();
    if (answered.length === 0) values.add(BEFORE[field]);
    for (const w of writes) {
      if (this.status(w) === 'failed') continue;
      const end = this.answered(w);
      if (answered.some((later) => later.invokedAt > end)) continue;
      values.add(w.writes[field]!);
    }
    return values;
  }

  private checkPeer(key: string, peer: RestoredPeer | undefined, violations: string[]): void {
    const name = this.name(key);
    const show = (values: Set<Value>): string => [...values].map(String).join(' or ');
    const exists = this.candidates(key, 'exists');
    if (!exists.has(peer !== undefined)) {
      violations.push(
        `${name} is ${peer ? 'present' : 'absent'} after ${this.after}; it may only be ${exists.has(true) ? 'present' : 'absent'}`,
      );
    }
    if (peer === undefined) return;
    const found: Record<Exclude<Field, 'exists'>, Value> = {
      limit: peer.limit,
      quota: peer.quota,
      plan: peer.plan,
      suspended: peer.suspended,
      expires: peer.expires,
    };
    for (const field of FIELDS) {
      if (field === 'exists') continue;
      const values = this.candidates(key, field);
      if (!values.has(found[field])) {
        violations.push(
          `${name}'s ${field} is ${String(found[field])} after ${this.after}; it may only be ${show(values)}`,
        );
      }
    }
    // Whole or absent: a cap set with a plan shows its quota with its plan.
    const source = this.writesOf(key, 'quota').find(
      (w) => w.writes.quota === peer.quota && w.kind === 'setCap',
    );
    if (source !== undefined && 'plan' in source.writes) {
      const plans = new Set<Value>([source.writes.plan!]);
      for (const w of this.writesOf(key, 'plan')) {
        if (w === source || this.status(w) === 'failed') continue;
        if (this.answered(w) > source.invokedAt) plans.add(w.writes.plan!);
      }
      if (!plans.has(peer.plan)) {
        violations.push(
          `${name} shows the quota of #${source.id} with plan ${peer.plan}, not its plan ${String(source.writes.plan)}: half a change`,
        );
      }
    }
    // An answered reset is not undone.
    if (peer.usedBytes !== null) {
      const counted = (after: number): number =>
        this.ops
          .filter((op) => op.key === key && op.counted !== undefined && op.invokedAt > after)
          .reduce((sum, op) => sum + (op.counted ?? 0), 0);
      let bound = counted(-1);
      let since = 'ever';
      for (const reset of this.ops) {
        if (reset.key !== key || reset.kind !== 'resetCap') continue;
        if (this.status(reset) !== 'answered') continue;
        if (counted(reset.invokedAt) < bound) {
          bound = counted(reset.invokedAt);
          since = `since reset #${reset.id}`;
        }
      }
      if (peer.usedBytes > bound) {
        violations.push(
          `${name}'s cap shows ${peer.usedBytes} bytes used after ${this.after}; the kernel counted ${bound} ${since}`,
        );
      }
    }
  }

  private checkAddresses(restored: Restored, violations: string[]): void {
    const owners = new Map<string, string>();
    const answeredIp = new Map<string, string>();
    for (const op of this.ops) {
      if (op.kind === 'create' && op.outcome?.ok && op.key !== null) {
        answeredIp.set(op.key, `${(op.outcome.value as CreatedPeer).ip}/32`);
      }
    }
    let strangers = 0;
    for (const [key, peer] of restored.peers) {
      const name = this.name(key);
      if (!answeredIp.has(key)) strangers++;
      else if (!peer.allowedIps.includes(answeredIp.get(key)!)) {
        violations.push(
          `${name} has ${peer.allowedIps.join(',') || 'no address'} after ${this.after}, not ${answeredIp.get(key)} as its create answered`,
        );
      }
      for (const ip of peer.allowedIps) {
        const other = owners.get(ip);
        if (other !== undefined) violations.push(`${other} and ${name} share ${ip}`);
        owners.set(ip, name);
      }
    }
    const holders = new Map<string, string>();
    for (const [key, ips] of restored.journal) {
      for (const ip of ips) {
        const other = holders.get(ip);
        if (other !== undefined) {
          violations.push(
            `${other} and ${this.name(key)} share ${ip} in the journal after ${this.after}`,
          );
        }
        holders.set(ip, this.name(key));
      }
    }
    const unanswered = this.ops.filter(
      (op) => op.kind === 'create' && this.status(op) === 'unanswered' && !op.outcome?.ok,
    ).length;
    if (strangers > unanswered) {
      violations.push(
        `${strangers} peers after ${this.after} that no create answered, and only ${unanswered} creates were in flight at the crash`,
      );
    }
  }

  private checkErrors(violations: string[]): void {
    for (const op of this.ops) {
      if (this.status(op) !== 'failed' || op.outcome?.ok !== false) continue;
      const error = op.outcome.error;
      const named =
        error instanceof StateWriteError ||
        error instanceof PeerNotFoundError ||
        (error instanceof NoDataCapError && op.kind === 'resetCap');
      if (!named) {
        violations.push(
          `#${op.id} ${op.text} answered an error the SPEC does not name: ${String(error)}`,
        );
      }
    }
  }
}

export function errorCode(error: unknown): string {
  if (error instanceof StateWriteError) return '507 STATE_WRITE_FAILED';
  if (error instanceof StateUndoFailedError) return '507 STATE_UNDO_FAILED';
  if (error instanceof StateWriteUncertainError) return '507 STATE_WRITE_UNCERTAIN';
  if (error instanceof PeerNotFoundError) return '404';
  if (error instanceof NoDataCapError) return '409 NO_DATA_CAP';
  return error instanceof Error ? `${error.name}: ${error.message}` : String(error);
}
