/**
 * The Grafana dashboard of contrib/grafana (issue 21), checked without a Prometheus: its shape,
 * and every query's PromQL parsed by Prometheus' own parser (promtool check rules on the
 * queries written as recording rules). test/kernel/monitoring.test.ts runs every query against
 * a real Prometheus scraping the daemon and requires series.
 */
import { expect } from 'chai';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import request from 'supertest';
import { createEventMetrics } from '../../../src/events';
import { createApp } from '../../../src/http/app';
import { createMetrics } from '../../../src/http/metrics';
import { registerStateMetrics } from '../../../src/http/state-metrics';
import { registerTlsMetrics } from '../../../src/http/tls';
import { PeerService, ReadinessCheck } from '../../../src/peers';
import { parseSamples } from '../../support/prom-text';
import { FakeKernel, netlinkError } from '../support/fake-kernel';
import { captureLog } from '../support/log-capture';
import { NOW, encoded, key } from '../http/helpers';
import {
  DASHBOARD_FILE,
  fillVariables,
  panelsOf,
  readDashboard,
  targetsOf,
  type Variables,
} from '../../support/dashboard';

const VARS: Variables = { job: 'wg-peerd', instance: '127.0.0.1:8080', rateInterval: '1m' };

describe('contrib/grafana dashboard', () => {
  const dashboard = readDashboard();

  it('asks every panel for data from the chosen Prometheus, job and instance', () => {
    const panels = panelsOf(dashboard);
    expect(panels.length).to.be.greaterThan(10);
    for (const panel of panels) {
      const where = panel.title ?? '(untitled)';
      expect(panel.targets, where).to.be.an('array').that.is.not.empty;
      expect(JSON.stringify(panel), where).to.contain('"uid":"${datasource}"');
    }
    for (const target of targetsOf(dashboard)) {
      const where = `${target.panel} ${target.refId}`;
      expect(target.expr, where).to.not.equal('');
      // Every selector of a series is narrowed to the dashboard's job and instance.
      const selectors = [...target.expr.matchAll(/\b[a-z_:][a-z0-9_:]*\{([^}]*)\}/g)];
      expect(selectors, where).to.not.be.empty;
      for (const [, labels] of selectors) {
        expect(labels, where).to.contain('job="$job"').and.contain('instance=~"$instance"');
      }
    }
    const variables = dashboard.templating.list.map((v) => v.name);
    expect(variables).to.deep.equal(['datasource', 'job', 'instance']);
  });

  it('has queries that Prometheus parses (promtool check rules)', () => {
    const rules = targetsOf(dashboard).map((t, i) => ({
      record: `dashboard:query_${i}`,
      expr: fillVariables(t.expr, VARS),
    }));
    const file = path.join(mkdtempSync(path.join(tmpdir(), 'wg-peerd-dashboard-')), 'q.yml');
    // JSON is YAML: no YAML writer needed.
    writeFileSync(file, JSON.stringify({ groups: [{ name: 'dashboard', rules }] }));
    const run = spawnSync('promtool', ['check', 'rules', file], { encoding: 'utf8' });
    expect(run.error, 'promtool (Debian package prometheus) must be installed').to.equal(undefined);
    expect(run.status, `${run.stdout}${run.stderr}`).to.equal(0);
    expect(run.stdout).to.contain(`SUCCESS: ${rules.length} rules found`);
  });

  it('fills in only the variables it defines', () => {
    expect(fillVariables('rate(x{job="$job"}[$__rate_interval])', VARS)).to.equal(
      'rate(x{job="wg-peerd"}[1m])',
    );
    expect(() => fillVariables('x{a="$other"}', VARS)).to.throw('unknown variable');
  });
});

/** Metric names in PromQL: wg_peerd_*, process_* and nodejs_* (Prometheus' own `up` aside). */
function metricNames(expr: string): string[] {
  return [...expr.matchAll(/\b(?:wg_peerd|process|nodejs)_[a-z0-9_]+\b/g)].map((m) => m[0]);
}

// The series the dashboard and the rules are written against are the daemon's: a scrape of the
// app wired as main.ts wires it, over the fake kernel, after one of each change.
describe('contrib/ metric names', () => {
  async function scrapedNames(): Promise<Set<string>> {
    const kernel = FakeKernel.withInterface();
    kernel.putPeer(key(9), ['10.8.0.9/32'], { lastHandshake: new Date(NOW - 1000), rxBytes: 5 });
    const log = captureLog();
    const metrics = createMetrics({
      service: { snapshot: () => service.snapshot() },
      perPeer: true,
      now: () => NOW,
      build: { version: '0.0.0-test', readiness: new ReadinessCheck(kernel, 'wg0') },
    });
    const service = new PeerService({
      kernel,
      interfaceName: 'wg0',
      logger: log.logger,
      now: () => NOW,
      observer: metrics.observer,
    });
    // The state directory's series, as main.ts registers them with --state-dir.
    registerStateMetrics(metrics.registry, {
      journalBytes: () => 0,
      checkpoints: () => ({
        lastAt: NOW,
        lastDurationMs: 1,
        failures: 0,
        sharedReads: 0,
        ownReads: 0,
      }),
      restoredPeers: () => 0,
    });
    // The event stream's and webhooks' series, which Events registers in the same registry.
    createEventMetrics(metrics.registry);
    // And the TLS certificate's, as with --tls-cert.
    registerTlsMetrics(metrics.registry, () => ({
      subject: 'CN=vpn1.example.net',
      notAfter: new Date(NOW + 90 * 86_400_000),
      fingerprint256: '00',
    }));
    const http = request(createApp({ service, logger: log.logger, metrics }));
    const peer = `/api/peer/${encoded(key(9))}`;
    expect(
      (await http.patch(`${peer}/speed-limit`).send({ bytesPerSecond: 5000 })).status,
    ).to.equal(200);
    expect((await http.patch(`${peer}/data-cap`).send({ quotaBytes: 100 })).status).to.equal(200);
    // One kernel error, so that its counter has a series.
    kernel.fail('getDevice', netlinkError('EPERM', 'WG_CMD_GET_DEVICE', 'not permitted'));
    expect((await http.get('/api/peers')).status).to.not.equal(200);
    const res = await http.get('/metrics');
    expect(res.status).to.equal(200);
    const names = new Set(parseSamples(res.text).map((s) => s.name));
    // A histogram's series are <name>_bucket, _count and _sum.
    for (const name of [...names]) names.add(name.replace(/_(bucket|count|sum)$/, ''));
    return names;
  }

  it('of the dashboard are all served by the daemon', async () => {
    const names = await scrapedNames();
    const used = new Set(targetsOf(readDashboard()).flatMap((t) => metricNames(t.expr)));
    expect(used.size).to.be.greaterThan(15);
    expect([...used].filter((name) => !names.has(name))).to.deep.equal([]);
  });

  it('of the alert rules are all served by the daemon', async () => {
    const names = await scrapedNames();
    const rules = readFileSync(
      path.join(DASHBOARD_FILE, '..', '..', 'prometheus', 'wg-peerd.rules.yml'),
      'utf8',
    );
    const used = new Set(metricNames(rules));
    expect(used.size).to.be.greaterThan(5);
    expect([...used].filter((name) => !names.has(name))).to.deep.equal([]);
  });
});
