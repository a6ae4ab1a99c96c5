/**
 * Phase HTTP: the API server made (tokens, TLS, the metrics, the event stream), then listening,
 * then, once the restore settled, the timers of the running daemon (usage checkpoints, billing
 * periods, whose read is the first list's), then the Express app loaded (src/http/index.ts:
 * the first list needs only the list's fast path, so the start does not wait for it), and the lines that say how it serves: `wg-peerd is serving`, then a warning for
 * each risk the operator chose (no token, plain HTTP away from loopback, an expired
 * certificate). A listen that fails, or a restore that fails, ends the start with one line and
 * closes what the earlier phases opened. READY=1 is not sent here: src/daemon/start.ts sends
 * it right after `servePhase` returns, the moment every phase is done.
 */
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import { formatListen, isLoopback, type Config } from '../config';
import { TokenStore, createHttpServer, registerTlsMetrics, type ApiServer } from '../http';
import type { Kernel } from '../kernel/types';
import type { Logger } from '../log';
import { validityWarning, type TlsMaterial } from '../tls-files';
import { closeQuietly, type Iface, type OpenedState, type Restore } from './bring-up';
import { EXIT_FAILURE, StartupError, messageOf, packageVersion, type DaemonDeps } from './contract';
import type { Services } from './services';

export interface Http {
  readonly server: ApiServer;
  /** null: no token at all, no authentication (allowed on loopback, or when told explicitly). */
  readonly tokens: TokenStore | null;
  /** The TLS files being served: those of the start, then of each good SIGHUP re-read. */
  readonly tls: { current: TlsMaterial | null };
  /**
   * Says the start's first read is done: the API's Express app, which the first list does not
   * need (the list's fast path answers it), is loaded then if no request needed it before.
   */
  readonly started: () => void;
}

/** What serving needs of the earlier phases. */
export interface ServeInput {
  readonly kernel: Kernel;
  readonly state: OpenedState;
  readonly iface: Iface;
  readonly restore: Restore;
  readonly services: Services;
}

/** The API server, not yet listening. */
export function httpPhase(config: Config, deps: DaemonDeps, services: Services): Http {
  const { admin, read } = config.tokens;
  const tokens = admin.length + read.length === 0 ? null : new TokenStore(config.tokens);
  const tls = { current: config.tls?.material ?? null };
  let started = (): void => undefined;
  const appAfter = new Promise<void>((resolve) => (started = resolve));
  if (tls.current !== null) {
    registerTlsMetrics(services.metrics.registry, () => tls.current!.certificate);
  }
  const server = createHttpServer({
    service: services.service,
    tokens,
    logger: deps.logger,
    metrics: services.metrics,
    readiness: services.readiness,
    version: packageVersion(),
    eventStreams: services.events.streams,
    limits: { maxConnections: config.maxConnections },
    tls: tls.current,
    appAfter,
  });
  return { server, tokens, tls, started };
}

/**
 * Listens, then waits for the restore, then starts the timers of the running daemon. An adopted
 * interface's peers are saved before the API answers anything (issue 28); any failed restore
 * ends the start once the API listened, as it always did.
 */
export async function servePhase(
  config: Config,
  deps: DaemonDeps,
  input: ServeInput,
  http: Http,
): Promise<AddressInfo> {
  const { kernel, restore, services } = input;
  if (input.iface.adopted !== null) await restore.restoring.catch(() => undefined);
  try {
    await listen(http.server, config);
  } catch (error) {
    kernel.close();
    throw new StartupError(
      `cannot listen on ${formatListen(config.listen)}: ${messageOf(error)}`,
      EXIT_FAILURE,
    );
  }
  try {
    await restore.restoring;
  } catch (error) {
    http.server.close();
    http.server.closeAllConnections();
    kernel.close();
    await closeQuietly(input.state);
    throw new StartupError(
      `cannot restore the saved state of ${config.interfaceName}: ${messageOf(error)}`,
      EXIT_FAILURE,
    );
  }
  await restore.settled;
  services.checkpoints?.start();
  // Billing periods: the kernel's plans to the scheduler; a reset missed while down is made now.
  await services.service.startPeriods().catch((error: unknown) => {
    deps.logger.error(
      { event: 'data_cap_periods_failed', error: messageOf(error) },
      `reading the data caps' billing periods failed (${messageOf(error)}); the next list read starts them`,
    );
  });
  http.started();
  return http.server.address() as AddressInfo;
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

/** `wg-peerd is serving`: where, for which interface, with which authentication and TLS. */
export function logServing(config: Config, logger: Logger, http: Http, address: AddressInfo): void {
  const { tokens } = http;
  const tls = http.tls.current;
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
}

/** A warning for each risk the configuration takes: no token, plain HTTP, an old certificate. */
export function warnRisks(config: Config, deps: DaemonDeps, http: Http): void {
  const { logger } = deps;
  if (http.tokens === null) {
    const who = isLoopback(config.listen.host)
      ? 'every local process, of any user,'
      : `every process that reaches ${formatListen(config.listen)}`;
    logger.warn(
      { event: 'no_token', listen: formatListen(config.listen) },
      `no token is configured: ${who} has admin rights over the API; give --token-file PATH or WG_PEERD_TOKEN`,
    );
  }
  if (http.tls.current === null && !isLoopback(config.listen.host)) {
    logger.warn(
      { event: 'plain_http', listen: formatListen(config.listen) },
      'serving plain HTTP on a non-loopback address: bearer tokens travel in clear; ' +
        'give --tls-cert and --tls-key to serve HTTPS',
    );
  }
  if (http.tls.current !== null) warnValidity(deps, http.tls.current);
}

/** The warning of a certificate not (or no longer) valid now, at start and on each reload. */
export function warnValidity(deps: DaemonDeps, material: TlsMaterial): void {
  const now = deps.now ?? (() => new Date());
  const warning = validityWarning(material.certificate, now());
  if (warning !== null) deps.logger.warn({ event: 'tls_certificate_expired' }, warning);
}

/** What the log says of the certificate served: whose it is, until when, which one. */
export function certificateFields(material: TlsMaterial): Record<string, string> {
  const { subject, notAfter, fingerprint256 } = material.certificate;
  return {
    certificateSubject: subject,
    certificateNotAfter: notAfter.toISOString(),
    certificateSha256: fingerprint256,
  };
}

/** Whether the server serves HTTPS (only then can its certificate be replaced). */
export function servesHttps(server: ApiServer): server is https.Server {
  return server instanceof https.Server;
}
