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
/** The rule unit tests: by the minute, and those that need a week of history (issue 32). */
const TESTS = ['wg-peerd.rules.test.yml', 'wg-peerd.rules.weekly.test.yml'];

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
    const { status, output } = promtool('test', 'rules', ...TESTS);
    expect(status, output).to.equal(0);
    expect(output).to.contain('SUCCESS');
  });

  it("alert on daemon down, not ready, kernel errors, a surge of caps used up (never one customer's cap: issue 32), dead peers, checkpoints, TLS expiry", () => {
    expect(alertNames()).to.deep.equal([
      'WgPeerdDown',
      'WgPeerdNotReady',
      'WgPeerdKernelErrors',
      'WgPeerdDataCapExhaustionSurge',
      'WgPeerdPeersDeadInBulk',
      'WgPeerdCheckpointFailing',
      'WgPeerdCheckpointStale',
      'WgPeerdTlsCertificateExpiring',
    ]);
  });

  it('never alert on one peer: no rule reads a per-peer series, so a customer using up a plan pages nobody and --metrics-per-peer false loses no alert (issue 32)', () => {
    const text = readFileSync(path.join(DIR, RULES), 'utf8');
    const exprs = text
      .split(/^\s*expr:/m)
      .slice(1)
      .map((e) => e.split(/^\s*labels:/m)[0]!);
    expect(exprs).to.have.length(alertNames().length);
    for (const expr of exprs) expect(expr).to.not.match(/wg_peerd_peer_/);
  });

  it('have, for every alert, a test in which it fires and one in which it does not', () => {
    const text = TESTS.map((file) => readFileSync(path.join(DIR, file), 'utf8')).join('\n');
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
