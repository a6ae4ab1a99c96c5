/**
 * The hub: gives each event its id, serializes it once, keeps the last `historySize` events
 * (`--event-history`), and of them no more than `maxHistoryBytes` of frames, and hands every
 * new one to the live listeners (the streams and the webhook targets) in order. A resumption
 * is owed only what the history holds: anything older is one `reset`, so no replay is ever
 * larger than the history's byte bound.
 */
import { randomBytes } from 'node:crypto';
import { wireName } from './catalog';
import { RESET_EVENT, type EventInput, type EventType, type StoredEvent } from './types';

/** What the hub reports, for /metrics (metrics.ts). */
export interface HubObserver {
  published(type: EventType): void;
}

export interface HubOptions {
  interfaceName: string;
  /** Events kept for resumption (`--event-history`), at least 1. */
  historySize: number;
  /** Bytes of frames the history keeps at most (the newest event always). */
  maxHistoryBytes?: number;
  /** Milliseconds since the epoch. */
  now?: () => number;
  /** This daemon run's id prefix; a random one by default (ids of another run get `reset`). */
  run?: string;
  observer?: HubObserver;
  /** A listener that threw; the others still get the event. */
  onListenerError?: (error: unknown) => void;
  /** A peer's name (issue 31), written as `name` into every peer event; absent: always null. */
  nameOf?: (publicKey: string) => string | null;
}

export type EventListener = (event: StoredEvent) => void;

/** The history's byte bound by default: 10,000 events of up to 1.6 KiB. */
export const MAX_HISTORY_BYTES = 16 * 1024 * 1024;

/** Where a stream with a Last-Event-ID starts: live, after a seq still held, or a reset. */
export type ResumePoint =
  { kind: 'live' } | { kind: 'replay'; after: number } | { kind: 'reset'; reason: string };

/** What a stream that connects with a Last-Event-ID gets. */
export type Resumption =
  { kind: 'live' } | { kind: 'replay'; events: StoredEvent[] } | { kind: 'reset'; reason: string };

const ID = /^([a-z0-9]+)\.(\d{1,15})$/;

/** The SSE frame of one event: every line of `data` is a `data:` line (JSON has none). */
export function sseFrame(id: string, type: string, json: string): Buffer {
  return Buffer.from(`id: ${id}\nevent: ${type}\ndata: ${json}\n\n`, 'utf8');
}

export class EventHub {
  readonly run: string;
  readonly interfaceName: string;
  readonly historySize: number;
  readonly maxHistoryBytes: number;
  private readonly now: () => number;
  private readonly observer: HubObserver | undefined;
  private readonly onListenerError: (error: unknown) => void;
  /** The history as a ring indexed by seq % historySize. */
  private readonly ring: Array<StoredEvent | undefined>;
  private seq = 0;
  /** The oldest seq the history holds (seq + 1 when it holds none). */
  private oldest = 1;
  private historyBytes = 0;
  private readonly listeners = new Set<EventListener>();
  private readonly countWatchers = new Set<(count: number) => void>();
  private readonly nameOf: (publicKey: string) => string | null;

  constructor(options: HubOptions) {
    if (!Number.isSafeInteger(options.historySize) || options.historySize < 1) {
      throw new RangeError(`historySize must be a positive integer, got ${options.historySize}`);
    }
    this.interfaceName = options.interfaceName;
    this.historySize = options.historySize;
    this.maxHistoryBytes = options.maxHistoryBytes ?? MAX_HISTORY_BYTES;
    this.now = options.now ?? Date.now;
    this.run = options.run ?? `${Date.now().toString(36)}${randomBytes(3).toString('hex')}`;
    if (!/^[a-z0-9]+$/.test(this.run)) throw new TypeError(`run must be [a-z0-9]+: ${this.run}`);
    this.observer = options.observer;
    this.onListenerError = options.onListenerError ?? (() => {});
    this.nameOf = options.nameOf ?? (() => null);
    this.ring = new Array<StoredEvent | undefined>(this.historySize);
  }

  /** The id of the last event published, `<run>.0` before the first. */
  get lastId(): string {
    return `${this.run}.${this.seq}`;
  }

  /** The seq of the last event published, 0 before the first. */
  get lastSeq(): number {
    return this.seq;
  }

  /** The event of `seq` while the history holds it. */
  eventAt(seq: number): StoredEvent | undefined {
    if (seq < this.oldest || seq > this.seq) return undefined;
    const event = this.ring[seq % this.historySize];
    return event?.seq === seq ? event : undefined;
  }

  /** Ids, serializes once, keeps and fans out one event; returns it as stored. */
  publish(input: EventInput): StoredEvent {
    const seq = this.seq + 1;
    const at = input.at ?? this.now();
    const data: Record<string, unknown> = {
      type: input.type,
      at: new Date(at).toISOString(),
      interface: this.interfaceName,
    };
    if (input.publicKey !== undefined) {
      data.public_key = input.publicKey;
      data.ip_address = input.ipAddress ?? null;
      data.name = input.publicKey === null ? null : this.nameOf(input.publicKey);
    }
    // The domain's camelCase as the wire's snake_case (a field left out stays out).
    const details: Readonly<Record<string, unknown>> = input.details ?? {};
    for (const [name, value] of Object.entries(details)) {
      if (value !== undefined) data[wireName(name)] = value;
    }
    const id = `${this.run}.${seq}`;
    const json = JSON.stringify(data);
    const event: StoredEvent = {
      seq,
      id,
      type: input.type,
      at,
      json,
      frame: sseFrame(id, input.type, json),
    };
    this.seq = seq;
    this.keep(event);
    this.observer?.published(input.type);
    for (const listener of this.listeners) {
      try {
        listener(event);
      } catch (error) {
        this.onListenerError(error);
      }
    }
    return event;
  }

  /** Puts `event` in the ring, dropping the oldest past the count and byte bounds. */
  private keep(event: StoredEvent): void {
    const slot = event.seq % this.historySize;
    const replaced = this.ring[slot];
    if (replaced !== undefined) {
      this.historyBytes -= replaced.frame.length;
      this.oldest = Math.max(this.oldest, replaced.seq + 1);
    }
    this.ring[slot] = event;
    this.historyBytes += event.frame.length;
    while (this.historyBytes > this.maxHistoryBytes && this.oldest < event.seq) {
      const dropped = this.oldest % this.historySize;
      this.historyBytes -= this.ring[dropped]?.frame.length ?? 0;
      this.ring[dropped] = undefined;
      this.oldest += 1;
    }
  }

  /**
   * What a client that last saw `lastEventId` misses: nothing to replay without an id (live
   * only), the events after it while the history still holds them all, else one reset (an id
   * of another run, one older than the history, one not issued yet, or not an id at all).
   */
  resume(lastEventId: string | undefined): Resumption {
    const point = this.resumeAfter(lastEventId);
    if (point.kind !== 'replay') return point;
    const events: StoredEvent[] = [];
    for (let seq = point.after + 1; seq <= this.seq; seq++) {
      const event = this.eventAt(seq);
      if (event !== undefined) events.push(event);
    }
    return { kind: 'replay', events };
  }

  /** `resume` without the events: where a replay starts, read from the history as it goes. */
  resumeAfter(lastEventId: string | undefined): ResumePoint {
    if (lastEventId === undefined || lastEventId === '') return { kind: 'live' };
    const match = ID.exec(lastEventId);
    if (!match) return { kind: 'reset', reason: 'Last-Event-ID is not an event id of wg-peerd' };
    if (match[1] !== this.run) {
      return { kind: 'reset', reason: 'Last-Event-ID is from another run of wg-peerd' };
    }
    const after = Number(match[2]);
    if (after > this.seq) {
      return { kind: 'reset', reason: 'Last-Event-ID names an event not issued yet' };
    }
    if (after + 1 < this.oldest) {
      return {
        kind: 'reset',
        reason:
          `events after Last-Event-ID are no longer in the history (it keeps ${this.historySize} ` +
          `events, at most ${this.maxHistoryBytes} bytes)`,
      };
    }
    return { kind: 'replay', after };
  }

  /**
   * The `reset` control frame: its id is the last event's, so a client that re-listed and
   * reconnects from there misses nothing after it.
   */
  resetFrame(reason: string): Buffer {
    const json = JSON.stringify({
      type: RESET_EVENT,
      at: new Date(this.now()).toISOString(),
      interface: this.interfaceName,
      reason,
    });
    return sseFrame(this.lastId, RESET_EVENT, json);
  }

  /** Live events from now on, in publish order; call the result to stop. */
  subscribe(listener: EventListener): () => void {
    this.listeners.add(listener);
    this.countChanged();
    return () => {
      if (this.listeners.delete(listener)) this.countChanged();
    };
  }

  get listenerCount(): number {
    return this.listeners.size;
  }

  /** Told of every change of listenerCount (the kernel watcher reads only while it is > 0). */
  onListenerCount(watcher: (count: number) => void): void {
    this.countWatchers.add(watcher);
  }

  private countChanged(): void {
    for (const watcher of this.countWatchers) watcher(this.listeners.size);
  }
}

export type { EventType, StoredEvent };
