/**
 * The alert rules of contrib/prometheus (issue 21): Prometheus' own checker and rule unit tester
 * (promtool, Debian package `prometheus`, which .ci/run installs) pass, and every alert of the
 * rule file has a test in which it fires.
 */
import { expect } from 'chai';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';

const DIR = path.resolve(__dirname, '..', '..', '..', '..', 'contrib', 'prometheus');
const RULES = 'wg-peerd.rules.yml';
const TESTS = 'wg-peerd.rules.test.yml';

function promtool(...args: string[]): { status: number | null; output: string } {
  const run = spawnSync('promtool', args, { cwd: DIR, encoding: 'utf8' });
  expect(run.error, 'promtool (Debian package prometheus) must be installed').to.equal(undefined);
  return { status: run.status, output: `${run.stdout}${run.stderr}` };
}

/** The names after `- alert:` in the rule file. */
function alertNames(): string[] {
  const text = readFileSync(path.join(DIR, RULES), 'utf8');
  return [...text.matchAll(/^\s*- alert:\s*(\S+)\s*$/gm)].map((m) => m[1]!);
}

describe('contrib/prometheus alert rules', () => {
  it('pass promtool check rules', () => {
    const { status, output } = promtool('check', 'rules', RULES);
    expect(status, output).to.equal(0);
    expect(output).to.contain(`SUCCESS: ${alertNames().length} rules found`);
  });

  it('pass their promtool unit tests', () => {
    const { status, output } = promtool('test', 'rules', TESTS);
    expect(status, output).to.equal(0);
    expect(output).to.contain('SUCCESS');
  });

  it('alert on daemon down, not ready, kernel errors, a cap, dead peers, checkpoints, TLS expiry', () => {
    expect(alertNames()).to.deep.equal([
      'WgPeerdDown',
      'WgPeerdNotReady',
      'WgPeerdKernelErrors',
      'WgPeerdDataCapExhausted',
      'WgPeerdPeersDeadInBulk',
      'WgPeerdCheckpointFailing',
      'WgPeerdCheckpointStale',
      'WgPeerdTlsCertificateExpiring',
    ]);
  });

  it('have, for every alert, a test in which it fires and one in which it does not', () => {
    const text = readFileSync(path.join(DIR, TESTS), 'utf8');
    // Each `alertname:` entry with what follows it up to the next entry.
    const entries = text.split(/^\s*- eval_time:/m).slice(1);
    for (const name of alertNames()) {
      const mine = entries.filter((e) => new RegExp(`alertname: ${name}\\s`).test(e));
      expect(
        mine.some((e) => /exp_alerts:\s*\[\]/.test(e)),
        `${name}: a test where it is silent`,
      ).to.equal(true);
      expect(
        mine.some((e) => /exp_alerts:\s*\n\s*- exp_labels/.test(e)),
        `${name}: a test where it fires`,
      ).to.equal(true);
    }
  });
});
