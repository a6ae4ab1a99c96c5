#!/usr/bin/env -S node --single-threaded-gc --max-semi-space-size=24
/**
 * wg-peerd: the process. Reads the configuration (DESIGN §4), opens the kernel, makes sure the
 * WireGuard interface exists (creating it when missing), serves the API, and shuts down
 * gracefully on SIGTERM/SIGINT: stop accepting, finish requests in flight, close the netlink
 * sockets, exit 0.
 */
import { readFileSync } from 'node:fs';
import { Counter } from 'prom-client';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import {
  ConfigError,
  formatListen,
  helpText,
  isLoopback,
  parseConfig,
  type Config,
} from './config';
import {
  Events,
  loadWebhooksFile,
  type DeliveryPolicy,
  type EventsOptions,
  type WebhookTarget,
} from './events';
import {
  TokenStore,
  createHttpServer,
  createMetrics,
  eventStreamHandler,
  registerTlsMetrics,
  replaceCertificate,
  type ApiServer,
} from './http';
import type { Kernel } from './kernel/types';
import type { CapExhaustedNotice, CapWatch } from './kernel/quota/exhaustion';
import { createLogger, isJournalStream, type Logger } from './log';
import { NativeAddonMissingError } from './netlink/native';
import {
  InterfaceNotWireGuardError,
  PeerService,
  ReadinessCheck,
  ensureInterface,
  savedExhaustions,
} from './peers';
import { loadTlsFiles, validityWarning, type TlsMaterial } from './tls-files';
import { UsageCheckpoints } from './peers/checkpoint';
import { UsageFence } from './peers/usage-fence';
import { restoreFromState, type RestoreSummary } from './peers/restore';
import {
  type Outbox,
  StateDirError,
  StateStore,
  readBootId,
  runStateCommand,
  type StateFs,
} from './state';
import { registerStateMetrics } from './http/state-metrics';
import { loadTokens, readTokenFileFromDisk, type ReadTokenFile } from './token-files';
import { SystemdNotifier, statusWhile, type StartNotices } from './systemd-notify';

/** Exit status for configuration the daemon cannot start with (DESIGN §4). */
export const EXIT_CONFIG = 2;
export const EXIT_FAILURE = 1;
/** How long requests in flight may take after SIGTERM before their connections are cut. */
export const SHUTDOWN_GRACE_MS = 10_000;

/** A start that cannot go on; `exitStatus` is 2 for configuration, 1 otherwise. */
export class StartupError extends Error {
  constructor(
    message: string,
    readonly exitStatus: number,
  ) {
    super(message);
    this.name = 'StartupError';
  }
}

export interface DaemonDeps {
  openKernel: () => Promise<Kernel>;
  logger: Logger;
  graceMs?: number;
  /** How token files (and TLS files) are read on reload; from disk when absent. */
  readTokenFile?: ReadTokenFile;
  /** The clock of the certificate's expiry warning; the system's when absent. */
  now?: () => Date;
  /** Webhook delivery timings (tests shorten them); DESIGN §3's defaults when absent. */
  webhookPolicy?: Partial<DeliveryPolicy>;
  /** The kernel's boot id (/proc/sys/kernel/random/boot_id when absent); for tests. */
  readBootId?: () => Promise<string>;
  /** The state directory's file system (the real one when absent); for tests. */
  stateFs?: StateFs;
  /** systemd's notifications (src/systemd-notify.ts): STATUS while restoring, READY=1. */
  notify?: StartNotices;
  /** The kernel's notices of exhausted caps (peer.cap_exhausted); none when absent. */
  watchCaps?: (
    ifname: string,
    onExhausted: (notice: CapExhaustedNotice) => void,
    onError: (error: Error) => void,
  ) => Promise<CapWatch>;
}

export interface Daemon {
  address: AddressInfo;
  /** Stops accepting, lets requests in flight finish, closes the kernel sockets. */
  shutdown(): Promise<void>;
  /**
   * What SIGHUP does: re-reads the token files. Success replaces the tokens (logged at info with
   * how many of each scope); a failure keeps the old ones and logs why at warn. True on success.
   */
  reloadTokens(): boolean;
  /** What SIGHUP also does: re-reads --webhooks-file; a bad file keeps the old targets. */
  reloadWebhooks(): boolean;
  /**
   * What SIGHUP also does with HTTPS: re-reads certificate, key and client CA together. Success
   * serves them to every new connection (connections open keep theirs) and is logged at info; a
   * bad file keeps the old ones and logs why at warn. True on success; false without TLS.
   */
  reloadTls(): boolean;
}

/** The version of package.json, next to dist/ (dist/src/main.js → ../../package.json). */
export function packageVersion(root: string = path.resolve(__dirname, '..', '..')): string {
  const manifest: unknown = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8'));
  const version =
    typeof manifest === 'object' && manifest !== null && 'version' in manifest
      ? manifest.version
      : undefined;
  if (typeof version !== 'string') throw new Error(`${root}/package.json has no version`);
  return version;
}

/** A start failure the operator fixes outside wg-peerd keeps its own message, unprefixed. */
function explains(error: unknown): boolean {
  return error instanceof NativeAddonMissingError;
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

function listen(server: ApiServer, config: Config): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(config.listen.port, config.listen.host, () => {
      server.off('error', reject);
      resolve();
    });
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
  logger: Logger,
): Promise<CapWatch | null> {
  if (deps.watchCaps === undefined) return null;
  const unavailable = (error: unknown): null => {
    logger.warn(
      { event: 'cap_notifications_unavailable', reason: messageOf(error) },
      `peer.cap_exhausted events are not available: ${messageOf(error)}`,
    );
    return null;
  };
  try {
    const watch = await deps.watchCaps(
      ifname,
      (notice) => events.capExhausted(notice),
      (error) =>
        logger.warn(
          { event: 'cap_notifications_lost', reason: messageOf(error) },
          `an nf_tables notification was lost or unreadable (${messageOf(error)}); the list still shows every exhausted cap`,
        ),
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

export async function startDaemon(config: Config, deps: DaemonDeps): Promise<Daemon> {
  const { logger } = deps;
  const readWebhooks = (): WebhookTarget[] =>
    config.webhooksFile === null
      ? []
      : loadWebhooksFile(config.webhooksFile, deps.readTokenFile ?? readTokenFileFromDisk);
  let webhookTargets: WebhookTarget[];
  try {
    webhookTargets = readWebhooks();
  } catch (error) {
    throw new StartupError(messageOf(error), EXIT_CONFIG);
  }
  let kernel: Kernel;
  try {
    kernel = await deps.openKernel();
  } catch (error) {
    throw new StartupError(
      explains(error)
        ? messageOf(error)
        : `cannot open the kernel's netlink sockets: ${messageOf(error)}`,
      EXIT_FAILURE,
    );
  }

  // The state directory is checked before anything changes in the kernel: a bad one (exposed,
  // damaged, another interface's) refuses the start with one line.
  let store: StateStore | null = null;
  // With webhooks, their pending deliveries are an outbox beside the journal (at least once).
  let outbox: Outbox | null = null;
  if (config.stateDir !== null) {
    try {
      store = await StateStore.open({
        dir: config.stateDir,
        interfaceName: config.interfaceName,
        ...(deps.stateFs === undefined ? {} : { fs: deps.stateFs }),
      });
      logStateOpened(store, logger);
      if (config.webhooksFile !== null) outbox = await openOutbox(store, logger);
    } catch (error) {
      kernel.close();
      throw new StartupError(
        error instanceof StateDirError
          ? error.message
          : `cannot use the state directory ${config.stateDir}: ${messageOf(error)}`,
        EXIT_CONFIG,
      );
    }
  }

  let iface: Awaited<ReturnType<typeof ensureInterface>>;
  try {
    const saved = store;
    iface = await ensureInterface(
      kernel,
      {
        interfaceName: config.interfaceName,
        address: config.address,
        address6: config.address6,
        listenPort: config.listenPort,
        ...(saved === null
          ? {}
          : {
              saved: {
                iface: saved.state.iface,
                readServerKey: () => saved.readServerKey(),
                saveInterface: (key, settings) => saved.saveInterface(key, settings),
              },
            }),
      },
      logger,
    );
  } catch (error) {
    kernel.close();
    await outbox?.close().catch(() => undefined);
    await store?.close().catch(() => undefined);
    const status =
      error instanceof InterfaceNotWireGuardError || error instanceof StateDirError
        ? EXIT_CONFIG
        : EXIT_FAILURE;
    throw new StartupError(messageOf(error), status);
  }

  // A dual-stack interface keeps its caps where IPv6 is counted too (issue 18). A kernel
  // without nf_tables is not an error here: caps then fail as they always did.
  try {
    const moved = await kernel.quota.setDualStack(
      config.interfaceName,
      iface.addresses6.length > 0,
    );
    for (const repair of moved) {
      logger.warn(
        { event: 'kernel_repaired', interface: config.interfaceName, facility: 'quota', ...repair },
        `data caps: ${repair.found}: ${repair.done}`,
      );
    }
  } catch (error) {
    logger.warn(
      { event: 'kernel_repair_failed', interface: config.interfaceName, error: messageOf(error) },
      'moving the data caps to a dual-stack (inet) table failed; the ip table still counts IPv4 alone: restart wg-peerd to move them',
    );
  }

  // With a state dir, the saved state goes back into the kernel while the API already answers:
  // /readyz says RESTORING, lists and changes wait for the end (never a half-restored list).
  let restored: RestoreSummary | null = null;
  const restoring: Promise<RestoreSummary | null> =
    store === null
      ? Promise.resolve(null)
      : (deps.readBootId ?? readBootId)().then((bootId) =>
          restoreFromState({
            kernel,
            store: store!,
            interfaceName: config.interfaceName,
            ifindex: iface.ifindex,
            created: iface.created,
            adopted: iface.adopted,
            bootId,
            logger,
          }),
        );
  let restoreDone = false;
  const gate = restoring.then(
    (summary) => {
      restored = summary;
      restoreDone = true;
    },
    () => {
      restoreDone = true;
    },
  );

  if (deps.notify !== undefined && store !== null) {
    const saved = store.state.peers.size;
    const what = `restoring ${saved} saved peers of ${config.interfaceName}`;
    statusWhile(deps.notify, gate, (seconds) => `${what} (${seconds} s)`);
  }

  // The metrics need the service (its snapshot) and the service their observer: `service` is
  // only read when /metrics is scraped, after both exist.
  const readiness = new ReadinessCheck(
    kernel,
    config.interfaceName,
    () => !restoreDone,
    () => store?.readOnly ?? null,
  );
  const metrics = createMetrics({
    service: { snapshot: () => service.snapshot() },
    perPeer: config.metricsPerPeer,
    build: { version: packageVersion(), readiness },
  });
  // The event stream and webhooks read the same shared snapshot as the list and the metrics.
  const events: Events = new Events({
    interfaceName: config.interfaceName,
    historySize: config.eventHistory,
    snapshot: () => service.snapshot(),
    // Every peer event carries the peer's name (issue 31).
    nameOf: (publicKey) => service.nameOf(publicKey),
    listMaxAgeMs: config.listMaxAgeMs,
    logger,
    registry: metrics.registry,
    webhookTargets,
    webhookPolicy: { giveUpAfterMs: config.webhookRetryForMs, ...deps.webhookPolicy },
    ...(outbox === null ? {} : { webhookOutbox: outbox }),
    maxStreams: config.maxEventStreams,
    streamStallMs: config.eventStreamStallS * 1000,
    // exhausted_at survives a restart only where the journal keeps it (README "API").
    ...(store === null ? {} : keptExhaustions(store, logger)),
  });
  const capWatch = await watchCaps(config.interfaceName, events, deps, logger);
  const periodResets = new Counter({
    name: 'wg_peerd_data_cap_period_resets_total',
    help: 'Billing-period resets of data caps made by this daemon run (on time or late at start)',
    registers: [metrics.registry],
  });
  // Reads of the caps and changes to them, ordered for the usage checkpoints (src/peers/usage-fence.ts).
  const usageFence = new UsageFence();
  const service: PeerService = new PeerService({
    kernel,
    interfaceName: config.interfaceName,
    endpointHost: config.endpointHost,
    logger,
    listMaxAgeMs: config.listMaxAgeMs,
    observer: metrics.observer,
    events: events.sink,
    journal: store,
    ready: restoring,
    addresses6: iface.addresses6,
    onPeriodReset: () => periodResets.inc(),
    exhaustion: events.exhaustionTimes,
    usageFence,
    clientDefaults: {
      dns: config.clientDns ?? [],
      allowedIps: config.clientAllowedIps,
      mtu: config.clientMtu,
      persistentKeepalive: config.clientKeepalive,
      presharedKeys: config.presharedKeys,
    },
  });
  const checkpoints =
    store === null
      ? null
      : new UsageCheckpoints({
          quota: kernel.quota,
          store,
          fence: usageFence,
          // Under polling, the list's read has the caps: a checkpoint reads none of its own.
          listReads: service.listReads,
          interfaceName: config.interfaceName,
          intervalMs: config.usageSaveIntervalS * 1000,
          logger,
        });
  if (store !== null && checkpoints !== null) {
    const saved = store;
    registerStateMetrics(metrics.registry, {
      journalBytes: () => saved.stats().bytes,
      checkpoints: () => checkpoints.stats,
      restoredPeers: () => restored?.restoredPeers ?? null,
      tornTailBytes: () => saved.tornTail?.bytes ?? 0,
    });
  }
  const { admin, read } = config.tokens;
  // No token at all: no authentication (allowed on loopback, or when told explicitly).
  const tokens = admin.length + read.length === 0 ? null : new TokenStore(config.tokens);
  // The TLS files being served: those of the start, then of each good SIGHUP re-read.
  let tls: TlsMaterial | null = config.tls?.material ?? null;
  if (tls !== null) registerTlsMetrics(metrics.registry, () => tls!.certificate);
  const server = createHttpServer({
    service,
    tokens,
    logger,
    metrics,
    readiness,
    version: packageVersion(),
    handlers: { events: eventStreamHandler(events.streams) },
    limits: { maxConnections: config.maxConnections },
    tls,
  });
  // An adopted interface's peers are saved before the API answers anything (issue 28); a
  // failure is reported below, as any failed restore.
  if (iface.adopted !== null) await restoring.catch(() => undefined);
  try {
    await listen(server, config);
  } catch (error) {
    kernel.close();
    throw new StartupError(
      `cannot listen on ${formatListen(config.listen)}: ${messageOf(error)}`,
      EXIT_FAILURE,
    );
  }
  try {
    await restoring;
  } catch (error) {
    server.close();
    server.closeAllConnections();
    kernel.close();
    await outbox?.close().catch(() => undefined);
    await store?.close().catch(() => undefined);
    throw new StartupError(
      `cannot restore the saved state of ${config.interfaceName}: ${messageOf(error)}`,
      EXIT_FAILURE,
    );
  }
  await gate;
  checkpoints?.start();
  // Billing periods: the kernel's plans to the scheduler; a reset missed while down is made now.
  await service.startPeriods().catch((error: unknown) => {
    logger.error(
      { event: 'data_cap_periods_failed', error: messageOf(error) },
      `reading the data caps' billing periods failed (${messageOf(error)}); the next list read starts them`,
    );
  });
  const address = server.address() as AddressInfo;
  logger.info(
    {
      event: 'listening',
      listen: formatListen({ host: address.address, port: address.port }),
      interface: config.interfaceName,
      authentication: tokens === null ? 'none' : 'bearer tokens',
      ...(tokens === null ? {} : { tokens: tokens.counts() }),
      tls: tls === null ? 'off' : tls.ca === undefined ? 'on' : 'mutual',
      ...(tls === null ? {} : certificateFields(tls)),
    },
    'wg-peerd is serving',
  );
  // The interface, its peers, limits and caps are back and the API answers: systemd may start
  // what comes After= the unit (Type=notify, contrib/systemd).
  const serving = formatListen({ host: address.address, port: address.port });
  deps.notify?.ready(`serving ${config.interfaceName} on ${serving}`);
  const now = deps.now ?? (() => new Date());
  if (tokens === null) {
    const who = isLoopback(config.listen.host)
      ? 'every local process, of any user,'
      : `every process that reaches ${formatListen(config.listen)}`;
    logger.warn(
      { event: 'no_token', listen: formatListen(config.listen) },
      `no token is configured: ${who} has admin rights over the API; give --token-file PATH or WG_PEERD_TOKEN`,
    );
  }
  if (tls === null && !isLoopback(config.listen.host)) {
    logger.warn(
      { event: 'plain_http', listen: formatListen(config.listen) },
      'serving plain HTTP on a non-loopback address: bearer tokens travel in clear; ' +
        'give --tls-cert and --tls-key to serve HTTPS',
    );
  }
  const warnValidity = (material: TlsMaterial): void => {
    const warning = validityWarning(material.certificate, now());
    if (warning !== null) logger.warn({ event: 'tls_certificate_expired' }, warning);
  };
  if (tls !== null) warnValidity(tls);

  let stopped: Promise<void> | null = null;
  const shutdown = (): Promise<void> => {
    stopped ??= new Promise<void>((resolve) => {
      logger.info({}, 'shutting down: finishing requests in flight');
      deps.notify?.stopping();
      const graceMs = deps.graceMs ?? SHUTDOWN_GRACE_MS;
      const force = setTimeout(() => {
        logger.warn({ graceMs }, 'requests still running after the grace period: closing them');
        server.closeAllConnections();
      }, graceMs);
      force.unref();
      // Event streams never end by themselves: end them, and stop reading and delivering.
      events.close();
      capWatch?.close();
      service.stopPeriods();
      // Stops accepting; keep-alive connections close once their request is answered.
      server.close(() => {
        clearTimeout(force);
        // The last usage checkpoint (a clean reboot loses no counted byte), then the journal.
        void (async () => {
          await checkpoints?.stop();
          // What is pending stays in the outbox: the next start delivers it once more.
          await outbox?.close().catch(() => undefined);
          await store?.close().catch((error: unknown) => {
            logger.error(
              { event: 'state_close_failed', error: messageOf(error) },
              messageOf(error),
            );
          });
          kernel.close();
          logger.info({}, 'stopped');
          resolve();
        })();
      });
      server.closeIdleConnections();
    });
    return stopped;
  };
  const reloadTokens = (): boolean => {
    if (tokens === null) {
      // Only a SIGHUP with nothing at all to re-read is worth a warning: with HTTPS or webhooks,
      // their own lines say what the signal did.
      if (config.tls === null && config.webhooksFile === null) {
        logger.warn(
          { event: 'tokens_not_reloaded' },
          'SIGHUP: no token, TLS or webhooks file is configured, nothing to re-read',
        );
      }
      return false;
    }
    try {
      tokens.replace(loadTokens(config.tokenSources, deps.readTokenFile ?? readTokenFileFromDisk));
    } catch (error) {
      logger.warn(
        { event: 'tokens_reload_failed', reason: messageOf(error) },
        `SIGHUP: keeping the old tokens: ${messageOf(error)}`,
      );
      return false;
    }
    logger.info({ event: 'tokens_reloaded', ...tokens.counts() }, 'SIGHUP: token files re-read');
    return true;
  };
  const reloadWebhooks = (): boolean => {
    if (config.webhooksFile === null) return false;
    try {
      events.webhooks.setTargets(readWebhooks());
    } catch (error) {
      logger.warn(
        { event: 'webhooks_reload_failed', reason: messageOf(error) },
        `SIGHUP: keeping the old webhook targets: ${messageOf(error)}`,
      );
      return false;
    }
    logger.info(
      { event: 'webhooks_reloaded', targets: events.webhooks.targetCount },
      'SIGHUP: webhooks file re-read',
    );
    return true;
  };
  const reloadTls = (): boolean => {
    if (config.tls === null || !(server instanceof https.Server)) return false;
    try {
      const next = loadTlsFiles(config.tls.sources, deps.readTokenFile ?? readTokenFileFromDisk);
      replaceCertificate(server, next);
      tls = next;
    } catch (error) {
      logger.warn(
        { event: 'tls_reload_failed', reason: messageOf(error) },
        `SIGHUP: keeping the old TLS certificate and key: ${messageOf(error)}`,
      );
      return false;
    }
    logger.info(
      { event: 'tls_reloaded', ...certificateFields(tls) },
      'SIGHUP: TLS certificate, key and client CA re-read',
    );
    warnValidity(tls);
    return true;
  };
  return { address, shutdown, reloadTokens, reloadWebhooks, reloadTls };
}

/**
 * The webhook outbox of the state directory: a file that must not be used refuses the start
 * (StateDirError); one that cannot be read or written leaves delivery in memory, said at warn.
 */
async function openOutbox(store: StateStore, logger: Logger): Promise<Outbox | null> {
  try {
    const { outbox, damaged } = await store.openOutbox();
    if (damaged !== null) {
      logger.warn(
        { event: 'webhook_outbox_torn', interface: store.interfaceName, ...damaged },
        `the webhook outbox ${store.outboxPath} held ${damaged.lines} damaged lines (a write a crash cut): skipped`,
      );
    }
    return outbox;
  } catch (error) {
    if (error instanceof StateDirError) throw error;
    logger.warn(
      {
        event: 'webhook_outbox_unavailable',
        interface: store.interfaceName,
        error: messageOf(error),
      },
      `the webhook outbox ${store.outboxPath} cannot be used (${messageOf(error)}): pending webhook deliveries live in memory only, a restart loses them`,
    );
    return null;
  }
}

/** What the start says of the state directory it opened: a dropped torn tail, read-only. */
function logStateOpened(store: StateStore, logger: Logger): void {
  const torn = store.tornTail;
  if (torn !== null) {
    logger.warn(
      { event: 'state_torn_tail', interface: store.interfaceName, ...torn },
      `the journal ended in a batch a crash cut (never acknowledged): dropped ${torn.bytes} ` +
        `bytes, ${torn.records} records`,
    );
  }
  if (store.readOnly !== null) {
    logger.warn(
      { event: 'state_read_only', interface: store.interfaceName, reason: store.readOnly },
      `the state directory is read-only (${store.readOnly}): the saved state is restored, ` +
        'every change answers 507 until its file system is repaired and wg-peerd restarted',
    );
  }
}

/** What the log says of the certificate served: whose it is, until when, which one. */
function certificateFields(material: TlsMaterial): Record<string, string> {
  const { subject, notAfter, fingerprint256 } = material.certificate;
  return {
    certificateSubject: subject,
    certificateNotAfter: notAfter.toISOString(),
    certificateSha256: fingerprint256,
  };
}

function readConfig(): Config {
  try {
    const outcome = parseConfig(process.argv.slice(2), process.env, readTokenFileFromDisk);
    if (outcome.kind === 'help') {
      process.stdout.write(helpText());
      process.exit(0);
    }
    if (outcome.kind === 'version') {
      process.stdout.write(`wg-peerd ${packageVersion()}\n`);
      process.exit(0);
    }
    return outcome.config;
  } catch (error) {
    if (error instanceof ConfigError) {
      process.stderr.write(`wg-peerd: ${error.message}\n`);
      process.exit(EXIT_CONFIG);
    }
    throw error;
  }
}

async function cli(): Promise<void> {
  const config = readConfig();
  const logger = createLogger({ level: config.logLevel });
  // Filled once the daemon is up; the SIGHUP handler exists before that.
  const running: { daemon?: Daemon } = {};
  // systemd's ExecReload (contrib/systemd) and `kill -HUP`: rotate tokens and TLS certificates
  // without a restart.
  // Installed before the start: SIGHUP's default action would kill a daemon still starting.
  process.on('SIGHUP', () => {
    if (running.daemon === undefined) {
      logger.warn(
        { signal: 'SIGHUP' },
        'SIGHUP while starting: the token and TLS files were just read',
      );
    } else {
      running.daemon.reloadTokens();
      running.daemon.reloadWebhooks();
      running.daemon.reloadTls();
    }
  });
  const notify = new SystemdNotifier({
    onError: (error) =>
      logger.warn(
        { event: 'systemd_notify_failed', error: error.message },
        `cannot notify systemd (NOTIFY_SOCKET): ${error.message}`,
      ),
  });
  let daemon: Daemon;
  try {
    daemon = await startDaemon(config, {
      logger,
      notify,
      // Loaded only once the configuration is good: a bad flag never needs the native addon.
      openKernel: async () => (await import('./kernel')).openKernel(),
      watchCaps: async (...args) => (await import('./kernel')).watchCapExhaustion(...args),
    });
  } catch (error) {
    const status = error instanceof StartupError ? error.exitStatus : EXIT_FAILURE;
    logger.fatal({ exitStatus: status }, messageOf(error));
    // Under systemd standard output (the log) and standard error are one journal stream: the
    // fatal line is in the journal once. Anywhere else it is also said in words on stderr.
    const journal = process.env['JOURNAL_STREAM'];
    if (!(isJournalStream(journal, 1) && isJournalStream(journal, 2))) {
      process.stderr.write(`wg-peerd: ${messageOf(error)}\n`);
    }
    process.exit(status);
  }
  running.daemon = daemon;
  let signalled = false;
  const onSignal = (signal: NodeJS.Signals): void => {
    if (signalled) {
      logger.warn({ signal }, 'second signal: exiting now');
      process.exit(EXIT_FAILURE);
    }
    signalled = true;
    logger.info({ signal }, 'signal received');
    void daemon.shutdown().then(() => process.exit(0));
  };
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);
}

if (require.main === module && process.argv[2] === 'state') {
  // `wg-peerd state salvage --state-dir DIR`: an offline repair, no daemon (src/state/salvage.ts).
  void runStateCommand(process.argv.slice(3), {
    out: (line) => process.stdout.write(`${line}\n`),
    err: (line) => process.stderr.write(`${line}\n`),
  }).then((status) => process.exit(status));
} else if (require.main === module) {
  cli().catch((error: unknown) => {
    process.stderr.write(`wg-peerd: ${messageOf(error)}\n`);
    process.exit(EXIT_FAILURE);
  });
}
