/**
 * Phase services: what runs behind the API once the interface exists, built in the order the
 * registry shows their metrics. The readiness check and the metrics; the events room (stream,
 * webhooks, exhaustion times the journal keeps) with the kernel's cap notifications; the peer
 * service, which waits for the restore before any list or change; the usage checkpoints of the
 * state directory and its metrics. The metrics and events read the service's snapshot and the
 * service needs their observer and sink: the snapshot is read late, only once /metrics is
 * scraped or an event is made, after all exist. Nothing here listens or starts a timer; the
 * checkpoints and billing periods start once the restore settled (src/daemon/serve.ts).
 */
import { Counter } from 'prom-client';
import type { Config } from '../config';
import { Events, type EventsOptions, type WebhookTarget } from '../events';
import { createMetrics } from '../http';
import { registerStateMetrics } from '../http/state-metrics';
import type { Kernel } from '../kernel/types';
import type { CapWatch } from '../kernel/quota/exhaustion';
import type { Logger } from '../log';
import { PeerService, ReadinessCheck, savedExhaustions, type PeerSnapshot } from '../peers';
import { UsageCheckpoints } from '../peers/checkpoint';
import { UsageFence } from '../peers/usage-fence';
import type { StateStore } from '../state';
import type { Iface, OpenedState, Restore } from './bring-up';
import { messageOf, packageVersion, type DaemonDeps } from './contract';

export interface Services {
  readonly readiness: ReadinessCheck;
  readonly metrics: ReturnType<typeof createMetrics>;
  readonly events: Events;
  readonly capWatch: CapWatch | null;
  readonly service: PeerService;
  readonly checkpoints: UsageCheckpoints | null;
}

/** What the services phase starts from: the earlier phases' results. */
export interface ServicesInput {
  readonly kernel: Kernel;
  readonly state: OpenedState;
  readonly iface: Iface;
  readonly restore: Restore;
  readonly webhookTargets: WebhookTarget[];
}

export async function servicesPhase(
  config: Config,
  deps: DaemonDeps,
  input: ServicesInput,
): Promise<Services> {
  const { kernel, state, restore } = input;
  const late: { service: PeerService | null } = { service: null };
  const snapshot = (): Promise<PeerSnapshot> => late.service!.snapshot();
  const readiness = new ReadinessCheck(
    kernel,
    config.interfaceName,
    () => !restore.done(),
    () => state.store?.readOnly ?? null,
  );
  const metrics = createMetrics({
    service: { snapshot },
    perPeer: config.metricsPerPeer,
    build: { version: packageVersion(), readiness },
  });
  const events = eventsRoom(config, deps, input, metrics.registry, {
    snapshot,
    // Every peer event carries the peer's name (issue 31).
    nameOf: (publicKey) => late.service?.nameOf(publicKey) ?? null,
  });
  // The kernel's news reaches the service once it exists: nothing reads before that.
  const capWatch = await watchCaps(config.interfaceName, events, deps, (kind) =>
    late.service?.kernelNoticed(kind),
  );
  // Reads of the caps and changes to them, ordered for the usage checkpoints (usage-fence.ts).
  const fence = new UsageFence();
  const service = peerService(config, deps.logger, input, { metrics, events, fence });
  late.service = service;
  const checkpoints = usageCheckpoints(config, deps.logger, input, { service, fence });
  if (state.store !== null && checkpoints !== null) {
    const saved = state.store;
    registerStateMetrics(metrics.registry, {
      journalBytes: () => saved.stats().bytes,
      checkpoints: () => checkpoints.stats,
      restoredPeers: () => restore.summary()?.restoredPeers ?? null,
      tornTailBytes: () => saved.tornTail?.bytes ?? 0,
    });
  }
  return { readiness, metrics, events, capWatch, service, checkpoints };
}

/** The event stream and webhooks, reading the same shared snapshot as the list and metrics. */
function eventsRoom(
  config: Config,
  deps: DaemonDeps,
  input: ServicesInput,
  registry: EventsOptions['registry'],
  { snapshot, nameOf }: Pick<EventsOptions, 'snapshot' | 'nameOf'>,
): Events {
  const { store, outbox } = input.state;
  return new Events({
    interfaceName: config.interfaceName,
    historySize: config.eventHistory,
    snapshot,
    nameOf,
    listMaxAgeMs: config.listMaxAgeMs,
    logger: deps.logger,
    registry,
    webhookTargets: input.webhookTargets,
    webhookPolicy: { giveUpAfterMs: config.webhookRetryForMs, ...deps.webhookPolicy },
    ...(outbox === null ? {} : { webhookOutbox: outbox }),
    maxStreams: config.maxEventStreams,
    streamStallMs: config.eventStreamStallS * 1000,
    // exhausted_at survives a restart only where the journal keeps it (README "API").
    ...(store === null ? {} : keptExhaustions(store, deps.logger)),
  });
}

/** The peers' domain over the kernel, waiting for the restore before any list or change. */
function peerService(
  config: Config,
  logger: Logger,
  input: ServicesInput,
  { metrics, events, fence }: { metrics: Services['metrics']; events: Events; fence: UsageFence },
): PeerService {
  const periodResets = new Counter({
    name: 'wg_peerd_data_cap_period_resets_total',
    help: 'Billing-period resets of data caps made by this daemon run (on time or late at start)',
    registers: [metrics.registry],
  });
  return new PeerService({
    kernel: input.kernel,
    interfaceName: config.interfaceName,
    endpointHost: config.endpointHost,
    logger,
    listMaxAgeMs: config.listMaxAgeMs,
    observer: metrics.observer,
    events: events.sink,
    journal: input.state.store,
    ready: input.restore.restoring,
    addresses6: input.iface.addresses6,
    onPeriodReset: () => periodResets.inc(),
    exhaustion: events.exhaustionTimes,
    usageFence: fence,
    clientDefaults: {
      dns: config.clientDns ?? [],
      allowedIps: config.clientAllowedIps,
      mtu: config.clientMtu,
      persistentKeepalive: config.clientKeepalive,
      presharedKeys: config.presharedKeys,
    },
  });
}

/** The usage checkpoints of the state directory (none without one); started after the restore. */
function usageCheckpoints(
  config: Config,
  logger: Logger,
  input: ServicesInput,
  { service, fence }: { service: PeerService; fence: UsageFence },
): UsageCheckpoints | null {
  const store = input.state.store;
  if (store === null) return null;
  return new UsageCheckpoints({
    quota: input.kernel.quota,
    store,
    fence,
    // Under polling, the list's read has the caps: a checkpoint reads none of its own.
    listReads: service.listReads,
    interfaceName: config.interfaceName,
    intervalMs: config.usageSaveIntervalS * 1000,
    logger,
  });
}

/**
 * peer.cap_exhausted from the kernel's own notification. Without it (nf_tables unreachable) the
 * daemon still serves, and says what is missing.
 */
async function watchCaps(
  ifname: string,
  events: Events,
  deps: DaemonDeps,
  noticed: (kind: 'nftables' | 'caps') => void,
): Promise<CapWatch | null> {
  if (deps.watchCaps === undefined) return null;
  const logger = deps.logger;
  const unavailable = (error: unknown): null => {
    logger.warn(
      { event: 'cap_notifications_unavailable', reason: messageOf(error) },
      `peer.cap_exhausted events are not available: ${messageOf(error)}`,
    );
    return null;
  };
  try {
    // The list reads the caps again after each (src/peers/usage-cadence.ts); after lost
    // notifications the caps and the suspended set, as after any change of the tables.
    const watch = await deps.watchCaps(
      ifname,
      (notice) => {
        noticed('caps');
        events.capExhausted(notice);
      },
      (error) => {
        noticed('nftables');
        logger.warn(
          { event: 'cap_notifications_lost', reason: messageOf(error) },
          `an nf_tables notification was lost or unreadable (${messageOf(error)}); the list still shows every exhausted cap`,
        );
      },
      () => noticed('nftables'),
    );
    watch.ready.catch(unavailable);
    return watch;
  } catch (error) {
    return unavailable(error);
  }
}

/** The journal's exhaustion times for the events room, and how it keeps new ones. */
function keptExhaustions(
  store: StateStore,
  logger: Logger,
): Pick<EventsOptions, 'exhaustions' | 'keepExhaustion'> {
  return {
    exhaustions: savedExhaustions(store.state),
    keepExhaustion: (publicKey, time) => {
      store.recordExhaustion(publicKey, time).catch((error: unknown) => {
        logger.error(
          { event: 'state_write_failed', publicKey, error: messageOf(error) },
          `saving when a data cap ran out in the state directory failed: ${messageOf(error)}`,
        );
      });
    },
  };
}
