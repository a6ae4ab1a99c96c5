#!/usr/bin/env -S node --single-threaded-gc --max-semi-space-size=8 --heap-growing-percent=50
/**
 * wg-peerd: the process. Reads the configuration (DESIGN §4), starts the daemon (its phases:
 * src/daemon/start.ts), and answers signals: SIGHUP re-reads the token, webhooks and TLS files
 * through the daemon's one reload path, SIGTERM/SIGINT shut down gracefully (stop accepting,
 * finish requests in flight, close the netlink sockets, exit 0). A start that fails is one
 * fatal log line (and, outside journald, the same words on stderr) and its exit status.
 */
import { ConfigError, helpText, parseConfig, type Config } from './config';
import {
  EXIT_CONFIG,
  EXIT_FAILURE,
  StartupError,
  messageOf,
  packageVersion,
} from './daemon/contract';
import type { Daemon } from './daemon/contract';
import { startDaemon } from './daemon/start';
import { createLogger, isJournalStream, type Logger } from './log';
import { runStateCommand } from './state';
import { SystemdNotifier } from './systemd-notify';
import { readTokenFileFromDisk } from './token-files';

export {
  EXIT_CONFIG,
  EXIT_FAILURE,
  SHUTDOWN_GRACE_MS,
  StartupError,
  packageVersion,
  type Daemon,
  type DaemonDeps,
} from './daemon/contract';
export { startDaemon } from './daemon/start';

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

/**
 * Whether a fatal line needs saying on stderr too: not when standard output (the log) and
 * standard error are both the journal stream systemd announced in JOURNAL_STREAM, or the
 * journal would hold every fatal error twice (issue 32); anywhere else, yes, in words.
 */
export function fatalAlsoOnStderr(
  journalStream: string | undefined,
  isJournal: typeof isJournalStream = isJournalStream,
): boolean {
  return !(isJournal(journalStream, 1) && isJournal(journalStream, 2));
}

/** A start that failed: one fatal log line, the same words on stderr outside journald, exit. */
function exitFatal(logger: Logger, error: unknown): never {
  const status = error instanceof StartupError ? error.exitStatus : EXIT_FAILURE;
  logger.fatal({ exitStatus: status }, messageOf(error));
  if (fatalAlsoOnStderr(process.env['JOURNAL_STREAM'])) {
    process.stderr.write(`wg-peerd: ${messageOf(error)}\n`);
  }
  process.exit(status);
}

/**
 * Signals, SIGHUP: systemd's ExecReload (contrib/systemd) and `kill -HUP` rotate tokens, webhook
 * targets and TLS certificates without a restart, through the daemon's one reload path.
 * Installed before the start: SIGHUP's default action would kill a daemon still starting.
 */
function onReloadSignal(logger: Logger, running: { daemon?: Daemon }): void {
  process.on('SIGHUP', () => {
    if (running.daemon === undefined) {
      logger.warn(
        { signal: 'SIGHUP' },
        'SIGHUP while starting: the token and TLS files were just read',
      );
    } else {
      running.daemon.reload();
    }
  });
}

/** Signals, SIGTERM and SIGINT: a graceful shutdown, exit 0; a second signal exits at once. */
function onStopSignals(logger: Logger, daemon: Daemon): void {
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

async function cli(): Promise<void> {
  const config = readConfig();
  const logger = createLogger({ level: config.logLevel });
  // Filled once the daemon is up; the SIGHUP handler exists before that.
  const running: { daemon?: Daemon } = {};
  onReloadSignal(logger, running);
  const notify = new SystemdNotifier({
    onError: (error) =>
      logger.warn(
        { event: 'systemd_notify_failed', error: error.message },
        `cannot notify systemd (NOTIFY_SOCKET): ${error.message}`,
      ),
  });
  try {
    running.daemon = await startDaemon(config, {
      logger,
      notify,
      // Loaded only once the configuration is good: a bad flag never needs the native addon.
      openKernel: async () => (await import('./kernel')).openKernel(),
      watchCaps: async (ifname, onExhausted, onError, onTablesChanged) =>
        (await import('./kernel')).watchCapExhaustion(
          ifname,
          onExhausted,
          onError,
          undefined,
          onTablesChanged,
        ),
    });
  } catch (error) {
    exitFatal(logger, error);
  }
  onStopSignals(logger, running.daemon);
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
