/**
 * The daemon's logger: pino, one JSON line per event. Secrets are redacted by key name as a
 * second line of defence; the first is that no code hands a private key or token to the logger.
 */
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

export interface LoggerOptions {
  level?: LogLevel;
  /** Where lines go; standard output when absent. */
  destination?: pino.DestinationStream;
}

export function createLogger(options: LoggerOptions = {}): Logger {
  const paths = REDACTED_KEYS.flatMap((key) => [key, `*.${key}`]);
  return pino(
    {
      name: 'wg-peerd',
      level: options.level ?? 'info',
      base: { pid: process.pid },
      timestamp: pino.stdTimeFunctions.isoTime,
      redact: { paths: [...paths, 'req.headers.authorization'], censor: '[redacted]' },
    },
    options.destination ?? pino.destination({ dest: 1, sync: true }),
  );
}
