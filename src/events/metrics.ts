/**
 * The events room's series on /metrics (the daemon's prom-client registry): open streams,
 * streams closed for falling behind or stalling, streams refused over --max-event-streams, events by type, webhook deliveries by target and outcome,
 * deliveries given up or dropped, queue depths; with a state dir, each target's outbox: its depth,
 * the age of its oldest pending delivery (read at each scrape) and its failed writes.
 */
import { Counter, Gauge, type Registry } from 'prom-client';
import type { HubObserver } from './hub';
import type { StreamsObserver } from './streams';
import { EVENT_TYPES } from './types';
import type { AttemptOutcome, OutboxDepth, WebhooksObserver } from './webhooks';

export const EVENT_METRIC = {
  streams: 'wg_peerd_event_streams',
  slowClosed: 'wg_peerd_event_streams_slow_closed_total',
  stalledClosed: 'wg_peerd_event_streams_stalled_closed_total',
  refused: 'wg_peerd_event_streams_refused_total',
  events: 'wg_peerd_events_total',
  deliveries: 'wg_peerd_webhook_deliveries_total',
  givenUp: 'wg_peerd_webhook_given_up_total',
  dropped: 'wg_peerd_webhook_dropped_total',
  queueDepth: 'wg_peerd_webhook_queue_depth',
  outboxDepth: 'wg_peerd_webhook_outbox_depth',
  outboxOldestAge: 'wg_peerd_webhook_outbox_oldest_age_seconds',
  outboxWriteFailures: 'wg_peerd_webhook_outbox_write_failures_total',
} as const;

const OUTCOMES: readonly AttemptOutcome[] = ['success', 'http_error', 'timeout', 'network_error'];

export interface EventMetrics {
  hub: HubObserver;
  streams: StreamsObserver;
  webhooks: WebhooksObserver;
}

export interface EventMetricsOptions {
  /** Each target's outbox, read at each scrape ([] without a state dir). */
  outbox?: () => readonly OutboxDepth[];
  /** Ms since the epoch (Date.now). */
  now?: () => number;
}

export function createEventMetrics(
  registry: Registry,
  options: EventMetricsOptions = {},
): EventMetrics {
  const registers = [registry];
  const now = options.now ?? Date.now;
  const readOutbox = options.outbox ?? (() => []);
  new Gauge({
    name: EVENT_METRIC.outboxDepth,
    help: 'With --state-dir: deliveries pending in the webhook outbox (on disk, delivered again after a restart), by target',
    labelNames: ['target'] as const,
    registers,
    collect() {
      this.reset();
      for (const { target, depth } of readOutbox()) this.set({ target }, depth);
    },
  });
  new Gauge({
    name: EVENT_METRIC.outboxOldestAge,
    help: 'With --state-dir: seconds since the oldest delivery pending in the webhook outbox was queued (0: none), by target',
    labelNames: ['target'] as const,
    registers,
    collect() {
      this.reset();
      for (const { target, oldestAt } of readOutbox()) {
        this.set({ target }, Number.isNaN(oldestAt) ? 0 : Math.max(0, (now() - oldestAt) / 1000));
      }
    },
  });
  const outboxWriteFailures = new Counter({
    name: EVENT_METRIC.outboxWriteFailures,
    help: 'Writes to the webhook outbox that failed (the event was delivered from memory), by target',
    labelNames: ['target'] as const,
    registers,
  });
  const streams = new Gauge({
    name: EVENT_METRIC.streams,
    help: 'Open GET /api/events streams',
    registers,
  });
  const slowClosed = new Counter({
    name: EVENT_METRIC.slowClosed,
    help: 'Event streams closed because their reader fell too far behind',
    registers,
  });
  const stalledClosed = new Counter({
    name: EVENT_METRIC.stalledClosed,
    help: 'Event streams closed because their reader left bytes untaken for --event-stream-stall',
    registers,
  });
  const refused = new Counter({
    name: EVENT_METRIC.refused,
    help: 'GET /api/events answered 503: --max-event-streams streams were open',
    registers,
  });
  const events = new Counter({
    name: EVENT_METRIC.events,
    help: 'Events published, by type',
    labelNames: ['type'] as const,
    registers,
  });
  const deliveries = new Counter({
    name: EVENT_METRIC.deliveries,
    help: 'Webhook delivery attempts by target (URL without query) and outcome: success (2xx), http_error, timeout, network_error',
    labelNames: ['target', 'outcome'] as const,
    registers,
  });
  const givenUp = new Counter({
    name: EVENT_METRIC.givenUp,
    help: 'Webhook deliveries given up after retrying for the bounded time, by target',
    labelNames: ['target'] as const,
    registers,
  });
  const dropped = new Counter({
    name: EVENT_METRIC.dropped,
    help: 'Events not queued for a webhook target because its queue was full, by target',
    labelNames: ['target'] as const,
    registers,
  });
  const queueDepth = new Gauge({
    name: EVENT_METRIC.queueDepth,
    help: 'Events waiting for, or in, delivery to a webhook target',
    labelNames: ['target'] as const,
    registers,
  });
  streams.set(0);
  for (const type of EVENT_TYPES) events.inc({ type }, 0);
  return {
    hub: { published: (type) => events.inc({ type }) },
    streams: {
      open: (count) => streams.set(count),
      slowReaderClosed: () => slowClosed.inc(),
      stalledClosed: () => stalledClosed.inc(),
      refused: () => refused.inc(),
    },
    webhooks: {
      attempt: (target, outcome) => deliveries.inc({ target, outcome }),
      gaveUp: (target) => givenUp.inc({ target }),
      dropped: (target) => dropped.inc({ target }),
      queueDepth: (target, depth) => {
        if (depth === 0) {
          // Present from the target's start, so every outcome can be rated before it happens.
          for (const outcome of OUTCOMES) deliveries.inc({ target, outcome }, 0);
          givenUp.inc({ target }, 0);
          dropped.inc({ target }, 0);
        }
        queueDepth.set({ target }, depth);
      },
      removed: (target) => {
        queueDepth.remove({ target });
      },
      outboxWriteFailed: (target) => outboxWriteFailures.inc({ target }),
    },
  };
}
