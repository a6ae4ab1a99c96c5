#!/usr/bin/env node
/**
 * wg-peerd: the process. Reads the configuration (DESIGN §4), opens the kernel, makes sure the
 * WireGuard interface exists (creating it when missing), serves the API, and shuts down
 * gracefully on SIGTERM/SIGINT: stop accepting, finish requests in flight, close the netlink
 * sockets, exit 0.
 */
import { readFileSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { ConfigError, formatListen, helpText, parseConfig, type Config } from './config';
import { createApp, createMetrics } from './http';
import type { Kernel } from './kernel/types';
import { createLogger, type Logger } from './log';
import { InterfaceNotWireGuardError, PeerService, ensureInterface } from './peers';

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
}

export interface Daemon {
  address: AddressInfo;
  /** Stops accepting, lets requests in flight finish, closes the kernel sockets. */
  shutdown(): Promise<void>;
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

function listen(server: http.Server, config: Config): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(config.listen.port, config.listen.host, () => {
      server.off('error', reject);
      resolve();
    });
  });
}

export async function startDaemon(config: Config, deps: DaemonDeps): Promise<Daemon> {
  const { logger } = deps;
  let kernel: Kernel;
  try {
    kernel = await deps.openKernel();
  } catch (error) {
    throw new StartupError(
      `cannot open the kernel's netlink sockets: ${messageOf(error)}`,
      EXIT_FAILURE,
    );
  }

  try {
    await ensureInterface(
      kernel,
      {
        interfaceName: config.interfaceName,
        address: config.address,
        listenPort: config.listenPort,
      },
      logger,
    );
  } catch (error) {
    kernel.close();
    const status = error instanceof InterfaceNotWireGuardError ? EXIT_CONFIG : EXIT_FAILURE;
    throw new StartupError(messageOf(error), status);
  }

  // The metrics need the service (its snapshot) and the service their observer: `service` is
  // only read when /metrics is scraped, after both exist.
  const metrics = createMetrics({
    service: { snapshot: () => service.snapshot() },
    perPeer: config.metricsPerPeer,
  });
  const service = new PeerService({
    kernel,
    interfaceName: config.interfaceName,
    endpointHost: config.endpointHost,
    logger,
    observer: metrics.observer,
  });
  const server = http.createServer(createApp({ service, token: config.token, logger, metrics }));
  try {
    await listen(server, config);
  } catch (error) {
    kernel.close();
    throw new StartupError(
      `cannot listen on ${formatListen(config.listen)}: ${messageOf(error)}`,
      EXIT_FAILURE,
    );
  }
  const address = server.address() as AddressInfo;
  logger.info(
    {
      event: 'listening',
      listen: formatListen({ host: address.address, port: address.port }),
      interface: config.interfaceName,
      authentication: config.token === null ? 'none' : 'bearer token',
    },
    'wg-peerd is serving',
  );

  let stopped: Promise<void> | null = null;
  const shutdown = (): Promise<void> => {
    stopped ??= new Promise<void>((resolve) => {
      logger.info({}, 'shutting down: finishing requests in flight');
      const graceMs = deps.graceMs ?? SHUTDOWN_GRACE_MS;
      const force = setTimeout(() => {
        logger.warn({ graceMs }, 'requests still running after the grace period: closing them');
        server.closeAllConnections();
      }, graceMs);
      force.unref();
      // Stops accepting; keep-alive connections close once their request is answered.
      server.close(() => {
        clearTimeout(force);
        kernel.close();
        logger.info({}, 'stopped');
        resolve();
      });
      server.closeIdleConnections();
    });
    return stopped;
  };
  return { address, shutdown };
}

function readConfig(): Config {
  try {
    const outcome = parseConfig(process.argv.slice(2), process.env, (path) =>
      readFileSync(path, 'utf8'),
    );
    if (outcome.kind === 'help') {
      process.stdout.write(helpText());
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
  const logger = createLogger();
  let daemon: Daemon;
  try {
    daemon = await startDaemon(config, {
      logger,
      // Loaded only once the configuration is good: a bad flag never needs the native addon.
      openKernel: async () => (await import('./kernel')).openKernel(),
    });
  } catch (error) {
    const status = error instanceof StartupError ? error.exitStatus : EXIT_FAILURE;
    logger.fatal({ exitStatus: status }, messageOf(error));
    process.stderr.write(`wg-peerd: ${messageOf(error)}\n`);
    process.exit(status);
  }
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

if (require.main === module) {
  cli().catch((error: unknown) => {
    process.stderr.write(`wg-peerd: ${messageOf(error)}\n`);
    process.exit(EXIT_FAILURE);
  });
}
