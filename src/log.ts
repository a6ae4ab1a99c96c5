/**
 * The daemon's logger: pino, one JSON line per event. Secrets are redacted by key name as a
 * second line of defence; the first is that no code hands a private key or token to the logger.
 *
 * Under journald (issue 21) each line starts with its syslog priority, `<4>{"level":40,...}`:
 * systemd connects a service's standard output to journald, which files every line at the
 * unit's default priority (info) unless the line starts with `<N>` (SyslogLevelPrefix=, on by
 * default; journald strips the prefix). So `journalctl -p warning` shows warnings and errors.
 * The prefix is written only when standard output IS the journal stream systemd announced in
 * `JOURNAL_STREAM` (systemd.exec(5): compare it with the device and inode of fd 1); anywhere
 * else (a terminal, a pipe, a file, Docker) the lines stay plain JSON. journald's native
 * protocol would need a Unix datagram socket, which Node.js does not offer.
 *
 * Fields of the work in progress (the request id and token name of a change, request-log.ts)
 * reach every line logged inside it through `withLogFields`, without handing a logger down.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { fstatSync } from 'node:fs';
import pino from 'pino';

export type Logger = pino.Logger;
export type LogLevel = pino.LevelWithSilent;

/** Keys whose values never reach a log line, at the top level and one level down. */
export const REDACTED_KEYS = [
  'privateKey',
  'clientConfig',
  'config',
  'token',
  'authorization',
] as const;

/**
 * The syslog priority of each pino level, as journald reads it from a `<N>` prefix
 * (/usr/include/sys/syslog.h: LOG_CRIT 2, LOG_ERR 3, LOG_WARNING 4, LOG_INFO 6, LOG_DEBUG 7).
 * fatal is LOG_CRIT: the daemon stops, the host does not (emerg and alert are the host's).
 */
export const JOURNAL_PRIORITY: Readonly<Record<pino.Level, number>> = {
  fatal: 2,
  error: 3,
  warn: 4,
  info: 6,
  debug: 7,
  trace: 7,
};

/**
 * Whether file descriptor `fd` is the journal stream systemd gave the process: `JOURNAL_STREAM`
 * holds `<device>:<inode>` of that stream; a child that inherited the variable but writes
 * elsewhere (a pipe, a file) must not prefix its lines.
 */
export function isJournalStream(
  journalStream: string | undefined,
  fd: number = 1,
  stat: (fd: number) => { dev: bigint; ino: bigint } = (n) => fstatSync(n, { bigint: true }),
): boolean {
  const match = journalStream === undefined ? null : /^(\d+):(\d+)$/.exec(journalStream);
  if (match === null) return false;
  try {
    const { dev, ino } = stat(fd);
    return dev === BigInt(match[1]!) && ino === BigInt(match[2]!);
  } catch {
    return false; // fd 1 closed: nothing to prefix for
  }
}

/**
 * A destination that starts every line with its level's `<N>`: one stream per level, of which
 * pino's multistream (dedupe) hands each line to the one of its level, so no line is parsed.
 */
export function journalDestination(destination: pino.DestinationStream): pino.MultiStreamRes {
  const levels = Object.entries(JOURNAL_PRIORITY) as Array<[pino.Level, number]>;
  return pino.multistream(
    levels.map(([level, priority]) => ({
      level,
      stream: { write: (line: string) => destination.write(`<${priority}>${line}`) },
    })),
    { dedupe: true },
  );
}

/** Fields every line logged inside some work carries (request id, token name, ...). */
export type LogFields = Readonly<Record<string, string | number | boolean>>;

const fieldStore = new AsyncLocalStorage<LogFields>();

/**
 * Works holding fields now. When none does, the storage is disabled: a live AsyncLocalStorage
 * keeps Node's async hooks on for every async operation of the process (src/netlink/
 * serial-queue.ts measured what that costs the polls, which never hold fields).
 */
let holding = 0;

/**
 * Runs `start` with `fields` on every line logged by it and by the async work it starts, and
 * returns the function that ends it (call it once the work is over, e.g. on the response's
 * close; the fields of work still running after that may be lost). Ending twice is harmless.
 */
export function withLogFields(fields: LogFields, start: () => void): () => void {
  holding += 1;
  let ended = false;
  const end = (): void => {
    if (ended) return;
    ended = true;
    holding -= 1;
    if (holding === 0) fieldStore.disable();
  };
  try {
    fieldStore.run(fields, start);
  } catch (error) {
    end();
    throw error;
  }
  return end;
}

export interface LoggerOptions {
  level?: LogLevel;
  /** Where lines go; standard output when absent. */
  destination?: pino.DestinationStream;
  /**
   * Prefix each line with its journald priority. Default: when no destination is given and
   * standard output is the journal stream of `JOURNAL_STREAM` (`env`, process.env by default).
   */
  journal?: boolean;
  env?: NodeJS.ProcessEnv;
}

export function createLogger(options: LoggerOptions = {}): Logger {
  const paths = REDACTED_KEYS.flatMap((key) => [key, `*.${key}`]);
  const destination = options.destination ?? pino.destination({ dest: 1, sync: true });
  const journal =
    options.journal ??
    (options.destination === undefined &&
      isJournalStream((options.env ?? process.env)['JOURNAL_STREAM']));
  return pino(
    {
      name: 'wg-peerd',
      level: options.level ?? 'info',
      base: { pid: process.pid },
      timestamp: pino.stdTimeFunctions.isoTime,
      redact: { paths: [...paths, 'req.headers.authorization'], censor: '[redacted]' },
      // A copy: pino's default merge writes the line's own fields (which win) into the object.
      mixin: () => ({ ...fieldStore.getStore() }),
    },
    journal ? journalDestination(destination) : destination,
  );
}
