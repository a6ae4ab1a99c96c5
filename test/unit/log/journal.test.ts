import { expect } from 'chai';
import { spawnSync } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, readFileSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import { createLogger, isJournalStream } from '../../../src/log';

const LOG_MODULE = path.resolve(__dirname, '..', '..', '..', 'src', 'log.js');

function memory(): { stream: Writable; text: () => string } {
  const chunks: string[] = [];
  const stream = new Writable({
    write(chunk: Buffer | string, _encoding, callback) {
      chunks.push(chunk.toString());
      callback();
    },
  });
  return { stream, text: () => chunks.join('') };
}

/** `<device>:<inode>` of a path, as systemd writes JOURNAL_STREAM (from stat(2), not fstat). */
function deviceInode(file: string): string {
  const st = statSync(file, { bigint: true });
  return `${st.dev}:${st.ino}`;
}

/**
 * A node process whose standard output is `out`, with JOURNAL_STREAM set as given, that makes
 * the daemon's default logger (no destination) and logs one warning.
 */
function logWarningTo(out: string, journalStream: string | undefined): string {
  const fd = openSync(out, 'w');
  try {
    const script = `require(${JSON.stringify(LOG_MODULE)}).createLogger().warn('disk nearly full')`;
    const env: NodeJS.ProcessEnv = { ...process.env };
    delete env['JOURNAL_STREAM'];
    if (journalStream !== undefined) env['JOURNAL_STREAM'] = journalStream;
    const run = spawnSync(process.execPath, ['-e', script], { env, stdio: ['ignore', fd, 'pipe'] });
    expect(run.status, run.stderr.toString()).to.equal(0);
  } finally {
    closeSync(fd);
  }
  return readFileSync(out, 'utf8');
}

// Issue 21: under systemd, standard output goes to journald at priority info unless a line starts
// with `<N>` (SyslogLevelPrefix=, on by default), so every level needs its syslog priority for
// `journalctl -p warning` to show warnings and errors. The priorities are syslog(3)'s, from
// /usr/include/sys/syslog.h: LOG_CRIT 2, LOG_ERR 3, LOG_WARNING 4, LOG_INFO 6, LOG_DEBUG 7.
describe('log lines under journald', () => {
  it('start with the syslog priority of their level, the JSON line after it unchanged', () => {
    const { stream, text } = memory();
    const logger = createLogger({ level: 'trace', destination: stream, journal: true });
    logger.trace('t');
    logger.debug('d');
    logger.info('i');
    logger.warn('w');
    logger.error('e');
    logger.fatal('f');
    const lines = text().trimEnd().split('\n');
    const prefixes = lines.map((line) => /^<(\d)>/.exec(line)?.[1]);
    expect(prefixes).to.deep.equal(['7', '7', '6', '4', '3', '2']);
    const parsed = lines.map((line) => JSON.parse(line.slice(3)) as Record<string, unknown>);
    expect(parsed.map((l) => [l['level'], l['msg']])).to.deep.equal([
      [10, 't'],
      [20, 'd'],
      [30, 'i'],
      [40, 'w'],
      [50, 'e'],
      [60, 'f'],
    ]);
  });

  it('write each line once, and only the levels the logger lets through', () => {
    const { stream, text } = memory();
    const logger = createLogger({ level: 'warn', destination: stream, journal: true });
    logger.info('hidden');
    logger.warn({ event: 'x' }, 'shown');
    expect(text().trimEnd().split('\n')).to.have.length(1);
    expect(text()).to.match(/^<4>\{"level":40,.*"event":"x".*"msg":"shown"\}\n$/);
  });

  it('stay plain JSON lines outside journald', () => {
    const { stream, text } = memory();
    createLogger({ destination: stream }).warn('w');
    expect(text()).to.match(/^\{"level":40,/);
  });
});

// systemd.exec(5): JOURNAL_STREAM holds the device and inode of the stream systemd connected to
// standard output and error; a process compares them with fstat(2) of its own descriptor.
describe('journal stream detection', () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'wg-peerd-journal-'));

  it('knows standard output is the journal stream when JOURNAL_STREAM names it', () => {
    const out = path.join(dir, 'matching');
    closeSync(openSync(out, 'w'));
    const text = logWarningTo(out, deviceInode(out));
    expect(text).to.match(/^<4>\{"level":40,.*"msg":"disk nearly full"\}\n$/);
  });

  it('writes plain JSON when JOURNAL_STREAM names another stream (an inherited variable)', () => {
    const other = path.join(dir, 'other');
    closeSync(openSync(other, 'w'));
    const text = logWarningTo(path.join(dir, 'elsewhere'), deviceInode(other));
    expect(text).to.match(/^\{"level":40,.*"msg":"disk nearly full"\}\n$/);
  });

  it('writes plain JSON without JOURNAL_STREAM', () => {
    expect(logWarningTo(path.join(dir, 'none'), undefined)).to.match(/^\{"level":40,/);
  });

  it('reads no journal stream from a malformed variable or a closed descriptor', () => {
    const stat = () => ({ dev: 8n, ino: 42n });
    expect(isJournalStream('8:42', 1, stat)).to.equal(true);
    for (const bad of ['', '8', '8:', ':42', '8:42:1', 'a:b', ' 8:42']) {
      expect(isJournalStream(bad, 1, stat), bad).to.equal(false);
    }
    const closed = () => {
      throw Object.assign(new Error('EBADF'), { code: 'EBADF' });
    };
    expect(isJournalStream('8:42', 1, closed)).to.equal(false);
  });
});
