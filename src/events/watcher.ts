/**
 * Connect, disconnect and behind-the-back changes, learned from the SHARED kernel read
 * (`snapshot()`: the read behind the list and /metrics). It reads only while someone listens,
 * at most once per `intervalMs` (the daemon's --list-max-age), and compares each read with the
 * one before: a peer whose status became ALIVE is `peer.connected` (at its handshake), ALIVE
 * become DEAD is `peer.disconnected` (at handshake + 150 s, so the boundary is exact whatever
 * the read interval), a peer that appeared or vanished without the daemon is `peer.created` or
 * `peer.deleted`, and a read that finds the interface gone is `interface.lost` until one finds
 * it again (`interface.restored`). Changes the daemon made itself are told to `note()` at once,
 * so a read that started before them does not report them a second time as behind its back.
 */
import {
  ALIVE,
  ALIVE_THRESHOLD_MS,
  DomainError,
  NO_HANDSHAKE,
  statusAt,
  tunnelAddressOf,
  type PeerSnapshot,
  type PeerStatus,
} from '../peers';
import type { EventInput } from './types';

export interface WatcherLogger {
  warn(object: Record<string, unknown>, message: string): void;
}

export interface WatcherOptions {
  snapshot: () => Promise<PeerSnapshot>;
  publish: (input: EventInput) => void;
  /** Shortest time between two reads, milliseconds. */
  intervalMs: number;
  logger: WatcherLogger;
  /**
   * Each successful read, after its comparison, with the read's tunnel address → public key (the
   * caps' second source: exhaustion.ts).
   */
  onRead?: (snapshot: PeerSnapshot, owners: ReadonlyMap<string, string>) => void;
}

interface Known {
  ip: string | null;
  status: PeerStatus;
  /** Milliseconds since the epoch of the last handshake, null without one. */
  handshake: number | null;
}

/** A change the daemon made, as the watcher needs it. */
export interface NotedChange {
  type: 'peer.created' | 'peer.deleted';
  publicKey: string;
  ipAddress: string | null;
}

export class KernelWatcher {
  /** The last read's peers; null before the first read (which only sets the baseline). */
  private known: Map<string, Known> | null = null;
  /** Peers the daemon changed, with the change counter then. */
  private readonly touched = new Map<string, number>();
  private changes = 0;
  private interfaceLost = false;
  private active = false;
  private timer: NodeJS.Timeout | null = null;
  private reading: Promise<void> | null = null;
  private lastReadStarted = -Infinity;

  constructor(private readonly options: WatcherOptions) {}

  /** Read while `listening` (someone has a stream open, or a webhook target is set). */
  setListening(listening: boolean): void {
    if (listening === this.active) return;
    this.active = listening;
    if (listening) this.schedule(0);
    else if (this.timer !== null) {
      clearTimeout(this.timer);
      this.timer = null;
    }
  }

  /** A creation or deletion the daemon made (it publishes the event itself). */
  note(change: NotedChange): void {
    this.changes += 1;
    this.touched.set(change.publicKey, this.changes);
    if (this.known === null) return;
    if (change.type === 'peer.created') {
      this.known.set(change.publicKey, {
        ip: change.ipAddress,
        status: NO_HANDSHAKE,
        handshake: null,
      });
    } else {
      this.known.delete(change.publicKey);
    }
  }

  /** One read and comparison now (also what the timer runs); resolves when it is done. */
  poll(): Promise<void> {
    this.reading ??= this.readOnce().finally(() => {
      this.reading = null;
    });
    return this.reading;
  }

  private schedule(delayMs: number): void {
    if (!this.active || this.timer !== null) return;
    this.timer = setTimeout(() => {
      this.timer = null;
      void this.poll().then(() => {
        const since = performance.now() - this.lastReadStarted;
        this.schedule(Math.max(0, this.options.intervalMs - since));
      });
    }, delayMs);
    this.timer.unref();
  }

  private async readOnce(): Promise<void> {
    const changesBefore = this.changes;
    this.lastReadStarted = performance.now();
    let snapshot: PeerSnapshot;
    try {
      snapshot = await this.options.snapshot();
    } catch (error) {
      this.readFailed(error);
      return;
    }
    if (this.interfaceLost) {
      this.interfaceLost = false;
      this.options.publish({ type: 'interface.restored', at: snapshot.takenAt });
    }
    const owners = this.compare(snapshot, changesBefore);
    this.options.onRead?.(snapshot, owners);
  }

  private readFailed(error: unknown): void {
    if (error instanceof DomainError && error.code === 'INTERFACE_MISSING') {
      if (!this.interfaceLost) {
        this.interfaceLost = true;
        this.options.publish({ type: 'interface.lost', details: { reason: error.message } });
      }
      return;
    }
    this.options.logger.warn(
      { event: 'event_read_failed', error: error instanceof Error ? error.message : String(error) },
      'the kernel read behind peer.connected/disconnected failed; the next read tries again',
    );
  }

  /** Compares the read with the last one; gives the read's tunnel address → public key. */
  private compare(snapshot: PeerSnapshot, changesBefore: number): Map<string, string> {
    const previous = this.known;
    const current = new Map<string, Known>();
    const owners = new Map<string, string>();
    // A peer the daemon changed after this read started: the daemon's word stands.
    const stale = (key: string): boolean => (this.touched.get(key) ?? 0) > changesBefore;
    for (const peer of snapshot.device.peers) {
      const key = peer.publicKey;
      const handshake = peer.lastHandshake === null ? null : peer.lastHandshake.getTime();
      const entry: Known = {
        ip: tunnelAddressOf(peer),
        status: statusAt(peer.lastHandshake, snapshot.takenAt).status,
        handshake,
      };
      if (entry.ip !== null) owners.set(entry.ip, key);
      if (stale(key)) {
        const kept = previous?.get(key);
        if (kept !== undefined) current.set(key, kept);
        continue;
      }
      current.set(key, entry);
      if (previous === null) continue;
      const before = previous.get(key);
      if (before === undefined) {
        this.options.publish({
          type: 'peer.created',
          ...this.about(key, entry, snapshot.takenAt),
          details: { origin: 'kernel' },
        });
      }
      const wasAlive = before?.status === ALIVE;
      if (entry.status === ALIVE && !wasAlive) {
        // ALIVE has a handshake; `at` and lastHandshake are the same instant either way.
        const at = handshake ?? snapshot.takenAt;
        this.options.publish({
          type: 'peer.connected',
          ...this.about(key, entry, at),
          details: { lastHandshake: new Date(at).toISOString(), endpoint: peer.endpoint },
        });
      } else if (wasAlive && entry.status !== ALIVE) {
        // The moment the handshake turned 150 s old (DESIGN §3), not when the read saw it.
        const at = handshake === null ? snapshot.takenAt : handshake + ALIVE_THRESHOLD_MS;
        this.options.publish({
          type: 'peer.disconnected',
          ...this.about(key, entry, at),
          details: { lastHandshake: iso(handshake) },
        });
      }
    }
    if (previous !== null) {
      for (const [key, before] of previous) {
        if (current.has(key)) continue;
        if (stale(key)) continue;
        this.options.publish({
          type: 'peer.deleted',
          ...this.about(key, before, snapshot.takenAt),
          details: { origin: 'kernel' },
        });
      }
    }
    // Peers the daemon changed meanwhile keep what note() recorded.
    if (previous !== null) {
      for (const [key, seq] of this.touched) {
        if (seq <= changesBefore) continue;
        const noted = previous.get(key);
        if (noted !== undefined) current.set(key, noted);
        else current.delete(key);
      }
    }
    for (const [key, seq] of [...this.touched]) {
      if (seq <= changesBefore) this.touched.delete(key);
    }
    this.known = current;
    return owners;
  }

  /** What a peer event says of its peer, and when. */
  private about(
    publicKey: string,
    entry: Known,
    at: number,
  ): { at: number; publicKey: string; ipAddress: string | null } {
    return { at, publicKey, ipAddress: entry.ip };
  }
}

function iso(ms: number | null): string | null {
  return ms === null ? null : new Date(ms).toISOString();
}
