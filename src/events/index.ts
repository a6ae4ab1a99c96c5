/**
 * src/events — the event stream and webhooks (DESIGN §3 "Events"), a room of its own: it imports
 * the domain's types and status rules from src/peers and nothing from http, kernel or netlink.
 * Contract: every event gets an id `<run>.<seq>` whose seq increases in the order the daemon
 * learned of the events; the last `historySize` events (`--event-history`) are kept, so a client
 * that reconnects with `Last-Event-ID` gets every event after it and then the live ones, and an
 * id the history no longer holds (older, from another daemon run, or not an id) gets exactly one
 * `reset` event (re-list, then go on). `?types=` filters a stream (`reset` always passes). An
 * event is serialized once, into one JSON text and one SSE frame, whatever the number of streams
 * and targets; the types and their details are defined once (catalog.ts). At most
 * --max-event-streams streams are open; a stream whose reader falls behind by more than a bound,
 * or leaves bytes untaken for --event-stream-stall, is closed with a log line and a metric,
 * never buffered without limit, and a replay goes out in slices under the same bound; a comment
 * line every 15 s keeps idle streams open through proxies. Sources: PeerService publishes the changes it makes when it makes them (the
 * `sink`); connect, disconnect and behind-the-back changes come from the shared kernel read,
 * read only while someone listens and at most once per --list-max-age (watcher.ts);
 * `peer.cap_exhausted` comes from the kernel's own nf_tables notification (`capExhausted`), or
 * from the shared read where the kernel holds that notice back (6.12), once either way
 * (exhaustion.ts); a cap that throttles adds `peer.throttled` right after it. Every fresh shared
 * read reaches it through `exhaustionTimes` (the service's port), which answers when each cap
 * ran out (the list's exhausted_at); the sink's resets, cap changes and deletes clear that at once.
 * Webhooks deliver the same events signed per Standard Webhooks (`webhook-id` = the event id),
 * with a timeout per attempt, the first retry within 30 s then exponential backoff with jitter
 * for --webhook-retry-for, and a bounded queue per target whose drops are counted; a target that
 * is down slows nothing else. With a state dir they are at least once: pending deliveries are a
 * durable outbox (`webhookOutbox`) delivered once more after a restart or a crash.
 */
import type { Registry } from 'prom-client';
import type {
  CapsRead,
  ExhaustionTimes,
  KnownExhaustion,
  PeerChange,
  PeerChangeSink,
  PeerSnapshot,
} from '../peers';
import { ExhaustionLatch, type ExhaustionTime } from './exhaustion';
import { EventHub } from './hub';
import { createEventMetrics } from './metrics';
import { EventStreams } from './streams';
import { domainName } from './catalog';
import type { EventInput, EventInputOf, EventType, EventValue } from './types';
import { KernelWatcher } from './watcher';
import {
  Webhooks,
  type DeliveryOutbox,
  type DeliveryPolicy,
  type Send,
  type WebhookTarget,
} from './webhooks';

export * from './types';
export { EVENT_CATALOG, EVENT_PAYLOAD_SCHEMA, domainName, wireName } from './catalog';
export { EventHub, MAX_HISTORY_BYTES, sseFrame, type ResumePoint, type Resumption } from './hub';
export {
  EventStreams,
  EventStreamsFullError,
  KEEP_ALIVE_MS,
  MAX_BUFFERED_BYTES,
  MAX_STREAMS,
  ADMISSIONS_PER_TURN,
  SLICE_BYTES,
  TURN_BYTES,
  TURN_MS,
  ARRIVAL_GAP_MS,
  MAX_PAUSE_MS,
  STALL_MS,
  type StreamSink,
} from './streams';
export { KernelWatcher } from './watcher';
export {
  DEFAULT_DELIVERY_POLICY,
  MAX_RESPONSE_BYTES,
  Webhooks,
  WebhooksFileError,
  fetchSend,
  loadWebhooksFile,
  outboxKeyOf,
  parseWebhooksText,
  retryDelayMs,
  targetLabel,
  type DeliveryOutbox,
  type DeliveryPolicy,
  type OutboxDepth,
  type PendingDelivery,
  type WebhookTarget,
} from './webhooks';
export { EVENT_METRIC, createEventMetrics } from './metrics';

/** `--event-history`'s default (DESIGN §4). */
export const DEFAULT_EVENT_HISTORY = 10_000;

export interface EventsLogger {
  info(object: Record<string, unknown>, message: string): void;
  warn(object: Record<string, unknown>, message: string): void;
  error(object: Record<string, unknown>, message: string): void;
}

export interface EventsOptions {
  interfaceName: string;
  /** `--event-history`. */
  historySize: number;
  /** The shared kernel read (PeerServiceApi.snapshot). */
  snapshot: () => Promise<PeerSnapshot>;
  /** `--list-max-age`: the watcher reads at most this often (1 s when it is 0). */
  listMaxAgeMs: number;
  logger: EventsLogger;
  /** Registers the room's series here (the daemon's /metrics registry). */
  registry?: Registry;
  webhookTargets?: readonly WebhookTarget[];
  /** Tests shorten the delivery timings. */
  webhookPolicy?: Partial<DeliveryPolicy>;
  send?: Send;
  /** With a state dir: the webhook outbox (pending deliveries survive restarts and crashes). */
  webhookOutbox?: DeliveryOutbox;
  /** The clock, ms since the epoch (Date.now; tests inject one). */
  now?: () => number;
  /** `--max-event-streams` (64 when absent). */
  maxStreams?: number;
  /** `--event-stream-stall`, in ms (60 s when absent). */
  streamStallMs?: number;
  /** Streams: keep-alive period and slow-reader bound (tests). */
  keepAliveMs?: number;
  maxBufferedBytes?: number;
  /** The history's byte bound (tests; 16 MiB when absent). */
  maxHistoryBytes?: number;
  /** Exhaustion times kept from an earlier run (a state dir's journal). */
  exhaustions?: readonly KnownExhaustion[];
  /**
   * Told of each exhaustion time learned (with the cap's owner) or forgotten (null), to keep it
   * (the journal); an exhaustion of a cap without an owner is not told.
   */
  keepExhaustion?: (publicKey: string, time: ExhaustionTime | null) => void;
  /** A peer's name (issue 31), written as `name` into every peer event; absent: null. */
  nameOf?: (publicKey: string) => string | null;
}

/** What the kernel's notification tells of an exhausted cap. */
export interface CapExhaustion {
  address: string;
  /** The owner's public key from the quota object's comment, when it has one. */
  publicKey: string | null;
  quotaBytes: number;
  usedBytes: number;
  /** The rate the peer is slowed to from now (afterCap "throttle"); absent or null: cut off. */
  throttleBytesPerSecond?: number | null;
}

/** The room, wired: the hub, its streams, the kernel watcher and the webhook targets. */
export class Events {
  readonly hub: EventHub;
  readonly streams: EventStreams;
  readonly watcher: KernelWatcher;
  readonly webhooks: Webhooks;
  /** Give it to PeerService (option `events`): the changes made through the daemon. */
  readonly sink: PeerChangeSink;
  /** Give it to PeerService (option `exhaustion`): the list's exhausted_at. */
  readonly exhaustionTimes: ExhaustionTimes;
  private readonly exhaustion: ExhaustionLatch;
  private readonly now: () => number;
  /** The caps the watcher's last read listed. */
  private watchedCaps: PeerSnapshot['caps'] | null = null;

  constructor(options: EventsOptions) {
    this.now = options.now ?? Date.now;
    this.exhaustion = new ExhaustionLatch(keeper(options.keepExhaustion));
    for (const known of options.exhaustions ?? []) {
      const { address, publicKey, quotaBytes, at } = known;
      this.exhaustion.seed(address, publicKey, { quotaBytes, at });
    }
    this.exhaustionTimes = { read: (read) => this.capsFound(read) };
    const metrics = options.registry
      ? createEventMetrics(options.registry, {
          outbox: () => this.webhooks.outboxDepths(),
        })
      : undefined;
    this.hub = new EventHub({
      interfaceName: options.interfaceName,
      now: this.now,
      historySize: options.historySize,
      maxHistoryBytes: options.maxHistoryBytes,
      observer: metrics?.hub,
      ...(options.nameOf === undefined ? {} : { nameOf: options.nameOf }),
      onListenerError: (error) =>
        options.logger.error(
          {
            event: 'event_listener_failed',
            error: error instanceof Error ? error.message : String(error),
          },
          'delivering an event to a stream or webhook target failed',
        ),
    });
    this.streams = new EventStreams(this.hub, {
      logger: options.logger,
      observer: metrics?.streams,
      keepAliveMs: options.keepAliveMs,
      maxBufferedBytes: options.maxBufferedBytes,
      maxStreams: options.maxStreams,
      stallMs: options.streamStallMs,
      now: options.now,
    });
    this.watcher = new KernelWatcher({
      snapshot: options.snapshot,
      publish: (input) => this.hub.publish(input),
      intervalMs: options.listMaxAgeMs > 0 ? options.listMaxAgeMs : 1000,
      logger: options.logger,
      onRead: (snapshot, owners) => {
        // The caps are read on a cadence of their own (src/peers/usage-cadence.ts): a read
        // that lists the caps the last one did says nothing new of them; a read's times are
        // its caps' own read, not the device's.
        if (snapshot.caps === this.watchedCaps) return;
        this.watchedCaps = snapshot.caps;
        const takenAt = snapshot.capsReadAt ?? snapshot.takenAt;
        const startedAt = snapshot.usage?.startedAt ?? snapshot.takenAt - snapshot.readMs;
        this.capsRead(snapshot.caps, owners, startedAt, takenAt);
      },
    });
    this.webhooks = new Webhooks(this.hub, {
      logger: options.logger,
      observer: metrics?.webhooks,
      policy: options.webhookPolicy,
      send: options.send,
      outbox: options.webhookOutbox,
    });
    this.hub.onListenerCount((count) => this.watcher.setListening(count > 0));
    this.webhooks.setTargets(options.webhookTargets ?? []);
    this.sink = {
      publish: (change: PeerChange) => {
        this.capRoom(change);
        if (change.type === 'peer.created' || change.type === 'peer.deleted') {
          this.watcher.note({
            type: change.type,
            publicKey: change.publicKey,
            ipAddress: change.ipAddress,
          });
        }
        this.hub.publish(fromPeerChange(change));
      },
    };
  }

  /** The kernel announced that a cap ran out (NFT_MSG_NEWOBJ to NFNLGRP_NFTABLES). */
  capExhausted(cap: CapExhaustion): void {
    if (!this.exhaustion.notice(cap.address, cap.publicKey, cap.quotaBytes, this.now())) return;
    const input: EventInputOf<'peer.cap_exhausted'> = {
      type: 'peer.cap_exhausted',
      publicKey: cap.publicKey,
      ipAddress: cap.address,
      details: { quotaBytes: cap.quotaBytes, usedBytes: cap.usedBytes },
    };
    this.hub.publish(input);
    this.throttled(input, cap.throttleBytesPerSecond);
  }

  /** A cap that throttles: its exhaustion is also `peer.throttled`, with the rate. */
  private throttled(
    exhausted: EventInputOf<'peer.cap_exhausted'>,
    rate: number | null | undefined,
  ): void {
    if (rate === null || rate === undefined) return;
    this.hub.publish({
      ...exhausted,
      type: 'peer.throttled',
      details: { ...exhausted.details, throttleBytesPerSecond: rate },
    });
  }

  /**
   * A change the daemon made that gives a cap room again (a reset, other quota bytes, the cap
   * removed, its peer deleted): its exhaustion is over at once, not at the next read.
   */
  private capRoom(change: PeerChange): void {
    const address = change.ipAddress;
    if (address === null) return;
    if (change.type === 'peer.cap_reset' || change.type === 'peer.deleted') {
      this.exhaustion.clear(address, this.now());
    } else if (change.type === 'peer.cap_changed') {
      const quota = change.details?.quota_bytes;
      this.exhaustion.clear(address, this.now(), typeof quota === 'number' ? quota : undefined);
    }
  }

  /** Every fresh shared read (the service's port): its news published, its caps' times. */
  private capsFound(read: CapsRead): ReadonlyMap<string, number> {
    this.capsRead(read.caps, read.owners, read.startedAt, read.takenAt);
    return this.exhaustion.times(read.caps);
  }

  /** The shared read's caps: one that is used up and was not announced is announced now. */
  private capsRead(
    caps: PeerSnapshot['caps'],
    owners: ReadonlyMap<string, string>,
    startedAt: number,
    takenAt: number,
  ): void {
    const news = this.exhaustion.read(caps, owners, startedAt, takenAt);
    for (const address of news) {
      const cap = caps.get(address)!;
      const input: EventInputOf<'peer.cap_exhausted'> = {
        type: 'peer.cap_exhausted',
        at: takenAt,
        publicKey: owners.get(address) ?? null,
        ipAddress: address,
        details: { quotaBytes: cap.quotaBytes, usedBytes: cap.usedBytes },
      };
      this.hub.publish(input);
      this.throttled(input, cap.throttleBytesPerSecond);
    }
  }

  /** Shutdown: ends the streams, stops reading and delivering. */
  close(): void {
    this.streams.closeAll();
    this.webhooks.close();
    this.watcher.setListening(false);
  }
}

/**
 * A change PeerService made, as an event: its details (src/peers writes them in the wire's
 * snake_case, typed loosely) in the catalog's camelCase, `origin` api unless it says otherwise
 * (a billing-period reset says period). The catalog's schema holds what comes out to the
 * wire (test/unit/http/events.test.ts checks every payload against it).
 */
export function fromPeerChange(change: PeerChange): EventInput {
  const details: Record<string, EventValue> = { origin: 'api' };
  for (const [name, value] of Object.entries(change.details ?? {}))
    details[domainName(name)] = value;
  // The one place loose details meet the catalog's types: PeerChangeType is a subset of
  // EventType (checked here by the compiler), and each type's fields are the service's own.
  const input: { type: EventType; publicKey: string; ipAddress: string | null; details: object } = {
    type: change.type,
    publicKey: change.publicKey,
    ipAddress: change.ipAddress,
    details,
  };
  return input as EventInput;
}

/** The latch's changes of known times, as the journal keeps them (by the cap's owner). */
function keeper(
  keep: EventsOptions['keepExhaustion'],
): ((address: string, owner: string | null, time: ExhaustionTime | null) => void) | undefined {
  if (keep === undefined) return undefined;
  return (_address, owner, time) => {
    if (owner !== null) keep(owner, time);
  };
}
