/**
 * One journal line per fatal error (issue 32). Under systemd the daemon's standard output and
 * standard error are one journal stream, named by JOURNAL_STREAM (<device>:<inode>); a start
 * that fails wrote its fatal log line AND the same words on stderr, so the journal showed every
 * fatal error twice. Here the built daemon runs with both descriptors on one file that
 * JOURNAL_STREAM names, as journald's stream would be, and fails to start on a state directory
 * others may read.
 */
import { expect } from 'chai';
import { spawnSync } from 'node:child_process';
import {
  closeSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readFileSync,
  rmSync,
  statSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';

import { fatalAlsoOnStderr } from '../../../src/main';

const MAIN = path.resolve(__dirname, '../../../src/main.js');

describe('wg-peerd process: a fatal error under journald (issue 32)', function () {
  this.timeout(30_000);
  let dir: string;
  let exposed: string;
  beforeEach(() => {
    dir = mkdtempSync(path.join(tmpdir(), 'wg-peerd-fatal-'));
    exposed = path.join(dir, 'state');
    mkdirSync(exposed, { mode: 0o755 });
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  function start(journal: boolean): { status: number | null; out: string; err: string } {
    const outFile = path.join(dir, 'out');
    const errFile = journal ? outFile : path.join(dir, 'err');
    const out = openSync(outFile, 'w');
    const err = journal ? out : openSync(errFile, 'w');
    const stat = statSync(outFile, { bigint: true });
    const env = Object.fromEntries(
      Object.entries(process.env).filter(
        ([name]) => !name.startsWith('WG_PEERD_') && name !== 'JOURNAL_STREAM',
      ),
    );
    if (journal) env['JOURNAL_STREAM'] = `${stat.dev}:${stat.ino}`;
    const run = spawnSync(process.execPath, [MAIN, '--state-dir', exposed], {
      env,
      stdio: ['ignore', out, err],
      timeout: 20_000,
    });
    closeSync(out);
    if (err !== out) closeSync(err);
    return {
      status: run.status,
      out: readFileSync(outFile, 'utf8'),
      err: journal ? '' : readFileSync(errFile, 'utf8'),
    };
  }

  it('writes the fatal line once when stdout and stderr are the journal stream, with its priority', () => {
    const { status, out } = start(true);
    expect(status).to.equal(2);
    const lines = out.split('\n').filter((line) => line.includes('has mode 0755'));
    expect(lines, out).to.have.length(1);
    // <2>: journald files it at priority crit (pino's fatal), so `journalctl -p err` shows it.
    expect(lines[0]).to.match(/^<2>\{"level":60,/);
  });

  it('still says it in words on stderr outside journald, beside the JSON log line', () => {
    const { status, out, err } = start(false);
    expect(status).to.equal(2);
    expect(out.split('\n').filter((line) => line.includes('has mode 0755'))).to.have.length(1);
    expect(err).to.match(/^wg-peerd: state directory .* has mode 0755/);
    expect(err.trimEnd().split('\n')).to.have.length(1);
  });
});

describe('wg-peerd process: where a fatal error is said besides the log (issue 32)', () => {
  const journal = '8:42';
  // Stands for fstat(2) of each descriptor: those listed are the journal stream 8:42.
  const streams =
    (...fds: number[]) =>
    (value: string | undefined, fd = 1): boolean =>
      value === journal && fds.includes(fd);

  it('says nothing more when standard output and standard error are both the journal stream', () => {
    expect(fatalAlsoOnStderr(journal, streams(1, 2))).to.equal(false);
  });

  it('says it on stderr when only standard output is the journal (stderr goes elsewhere)', () => {
    expect(fatalAlsoOnStderr(journal, streams(1))).to.equal(true);
  });

  it('says it on stderr without JOURNAL_STREAM (a terminal, a pipe, a container)', () => {
    expect(fatalAlsoOnStderr(undefined, streams(1, 2))).to.equal(true);
  });
});
