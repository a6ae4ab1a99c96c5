/**
 * The state directory's series on GET /metrics (issue 16): when the last usage checkpoint was
 * made and how long it took, failed checkpoints, where checkpoints took their counts from (the
 * list's shared read or a read of their own), the journal's size, how many peers the start
 * put back, and the bytes of a torn last batch the start dropped. Gauges read at scrape time from the daemon's own objects; nothing is polled.
 */
import { Counter, Gauge, type Registry } from 'prom-client';

export interface StateMetricsSource {
  journalBytes(): number;
  checkpoints(): {
    lastAt: number | null;
    lastDurationMs: number | null;
    failures: number;
    sharedReads: number;
    ownReads: number;
  };
  /** Peers put back into the kernel at start; null until the restore ended. */
  restoredPeers(): number | null;
  /** Bytes of a torn last batch the start dropped from the journal (issue 28); 0: none. */
  tornTailBytes?(): number;
}

export function registerStateMetrics(registry: Registry, source: StateMetricsSource): void {
  new Gauge({
    name: 'wg_peerd_state_last_checkpoint_timestamp_seconds',
    help: 'Unix time when the counts saved by the last successful usage checkpoint were read',
    registers: [registry],
    collect() {
      const at = source.checkpoints().lastAt;
      if (at !== null) this.set(at / 1000);
    },
  });
  new Gauge({
    name: 'wg_peerd_state_checkpoint_duration_seconds',
    help: 'How long the last successful usage checkpoint took (its read of the caps, or its wait for the list read it shares, and the disk flush)',
    registers: [registry],
    collect() {
      const ms = source.checkpoints().lastDurationMs;
      if (ms !== null) this.set(ms / 1000);
    },
  });
  let failuresSeen = 0;
  new Counter({
    name: 'wg_peerd_state_checkpoint_failures_total',
    help: 'Usage checkpoints that failed (read or disk); the next one tries again',
    registers: [registry],
    collect() {
      const failures = source.checkpoints().failures;
      if (failures > failuresSeen) this.inc(failures - failuresSeen);
      failuresSeen = failures;
    },
  });
  const readsSeen = { list: 0, own: 0 };
  new Counter({
    name: 'wg_peerd_state_checkpoint_reads_total',
    help: 'Successful usage checkpoints by where their counts came from: the list read they shared (list) or a read of the caps of their own (own)',
    labelNames: ['read'],
    registers: [registry],
    collect() {
      const stats = source.checkpoints();
      for (const [read, now] of [
        ['list', stats.sharedReads],
        ['own', stats.ownReads],
      ] as const) {
        // Both series from the first scrape, at 0 until a checkpoint counts in them.
        this.inc({ read }, Math.max(0, now - readsSeen[read]));
        readsSeen[read] = now;
      }
    },
  });
  new Gauge({
    name: 'wg_peerd_state_journal_bytes',
    help: 'Size of the state directory journal in bytes',
    registers: [registry],
    collect() {
      this.set(source.journalBytes());
    },
  });
  let tornSeen = 0;
  new Counter({
    name: 'wg_peerd_state_torn_tail_bytes_total',
    help: 'Bytes of a torn last batch (a write a crash cut, never acknowledged) dropped from the journal at start',
    registers: [registry],
    collect() {
      const bytes = source.tornTailBytes?.() ?? 0;
      this.inc(Math.max(0, bytes - tornSeen));
      tornSeen = Math.max(tornSeen, bytes);
    },
  });
  new Gauge({
    name: 'wg_peerd_state_restored_peers',
    help: 'Peers the start put back into the kernel from the state directory',
    registers: [registry],
    collect() {
      const peers = source.restoredPeers();
      if (peers !== null) this.set(peers);
    },
  });
}
