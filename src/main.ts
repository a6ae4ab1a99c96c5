#!/usr/bin/env node
/**
 * wg-peerd: the process. Reads the configuration (DESIGN §4), opens the kernel, makes sure the
 * WireGuard interface exists (creating it when missing), serves the API, and shuts down
 * gracefully on SIGTERM/SIGINT: stop accepting, finish requests in flight, close the netlink
 * sockets, exit 0.
 */
import { readFileSync } from 'node:fs';
import http from 'node:http';
import { ConfigError, formatListen, helpText, parseConfig, type Config } from './config';
import { createApp } from './http';
import type { Kernel } from './kernel/types';
import { createLogger, type Logger } from './log';
import { InterfaceNotWireGuardError, PeerService, ensureInterface } from './peers';

/** Exit status for configuration the daemon cannot start with (DESIGN §4). */
export const EXIT_CONFIG = 2;
export const EXIT_FAILURE = 1;
/** How long in-flight requests may take to finish after SIGTERM before connections are cut. */
const SHUTDOWN_GRACE_MS = 10_000;

function fail(status: number, message: string, logger?: Logger): never {
  logger?.fatal({ exitStatus: status }, message);
  process.stderr.write(`wg-peerd: ${message}\n`);
  process.exit(status);
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
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
    if (error instanceof ConfigError) fail(EXIT_CONFIG, error.message);
    throw error;
  }
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

async function start(): Promise<void> {
  const config = readConfig();
  const logger = createLogger();

  let kernel: Kernel;
  try {
    // Loaded only once the configuration is good: a bad flag never needs the native addon.
    const { openKernel } = await import('./kernel');
    kernel = await openKernel();
  } catch (error) {
    fail(EXIT_FAILURE, `cannot open the kernel's netlink sockets: ${messageOf(error)}`, logger);
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
    fail(status, messageOf(error), logger);
  }

  const service = new PeerService({
    kernel,
    interfaceName: config.interfaceName,
    endpointHost: config.endpointHost,
    logger,
  });
  const app = createApp({ service, token: config.token, logger });
  const server = http.createServer(app);
  try {
    await listen(server, config);
  } catch (error) {
    kernel.close();
    fail(
      EXIT_FAILURE,
      `cannot listen on ${formatListen(config.listen)}: ${messageOf(error)}`,
      logger,
    );
  }
  logger.info(
    {
      event: 'listening',
      listen: formatListen(config.listen),
      interface: config.interfaceName,
      authentication: config.token === null ? 'none' : 'bearer token',
    },
    'wg-peerd is serving',
  );

  let stopping = false;
  const shutdown = (signal: NodeJS.Signals): void => {
    if (stopping) {
      logger.warn({ signal }, 'second signal: exiting now');
      process.exit(EXIT_FAILURE);
    }
    stopping = true;
    logger.info({ signal }, 'shutting down: finishing requests in flight');
    const force = setTimeout(() => {
      logger.warn({ graceMs: SHUTDOWN_GRACE_MS }, 'requests still running: closing connections');
      server.closeAllConnections();
    }, SHUTDOWN_GRACE_MS);
    force.unref();
    // Stops accepting; keep-alive connections are closed once idle.
    server.close(() => {
      clearTimeout(force);
      kernel.close();
      logger.info({}, 'stopped');
      process.exit(0);
    });
    server.closeIdleConnections();
  };
  process.on('SIGTERM', shutdown);
  process.on('SIGINT', shutdown);
}

if (require.main === module) {
  start().catch((error: unknown) => fail(EXIT_FAILURE, messageOf(error)));
}
