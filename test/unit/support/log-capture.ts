/** A pino logger whose lines land in memory, for asserting on what is (and is not) logged. */
import { Writable } from 'node:stream';
import { createLogger, type Logger } from '../../../src/log';

export interface CapturedLog {
  logger: Logger;
  /** Every line written so far, raw. */
  text(): string;
  /** Every line written so far, parsed. */
  lines(): Array<Record<string, unknown>>;
}

export function captureLog(): CapturedLog {
  const chunks: string[] = [];
  const stream = new Writable({
    write(chunk: Buffer | string, _encoding, callback) {
      chunks.push(chunk.toString());
      callback();
    },
  });
  const logger = createLogger({ level: 'debug', destination: stream });
  return {
    logger,
    text: () => chunks.join(''),
    lines: () =>
      chunks
        .join('')
        .split('\n')
        .filter((line) => line.trim() !== '')
        .map((line) => JSON.parse(line) as Record<string, unknown>),
  };
}
