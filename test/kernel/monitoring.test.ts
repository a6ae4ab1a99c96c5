/**
 * The monitoring kit against the real thing (issue 21, Done-when 2 and 3):
 * - journald: the daemon runs with its standard output connected to a real systemd-journald
 *   (started here by hand: the VM has no systemd as PID 1) through `systemd-cat`, which connects
 *   the stream as systemd does for a service (identifier, level prefixes on). Debian 12's
 *   systemd-cat does not set JOURNAL_STREAM, so the daemon is started the way systemd starts a
 *   service: with JOURNAL_STREAM set to the device and inode of that stream (systemd.exec(5)).
 *   `journalctl -p warning` must show the warning the daemon logged and not its info lines;
 *   change lines in the journal carry the request id and the token's name.
 * - Prometheus: Debian's `prometheus` scrapes that daemon every second, with the alert rules of
 *   contrib/prometheus loaded. Every query of the Grafana dashboard (contrib/grafana) must return
 *   series, the rules must evaluate without error, and the kernel-error and not-ready alerts
 *   must go off once the interface is deleted behind the daemon's back.
 */
import { expect } from 'chai';
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import {
  chmodSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readFileSync,
  writeFileSync,
} from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fillVariables, readDashboard, targetsOf } from '../support/dashboard';
import {
  type CreatedPeer,
  type DaemonProcess,
  call,
  configureClient,
  startDaemon,
} from './support/daemon';
import {
  CLIENT_NS,
  SERVER_UNDERLAY_IP,
  assertInTestVm,
  deleteLink,
  ping,
  setupClientNamespace,
  sh,
  teardownClientNamespace,
} from './support/topology';

const REPO = path.resolve(__dirname, '..', '..', '..');
const RULES_FILE = path.join(REPO, 'contrib', 'prometheus', 'wg-peerd.rules.yml');
const IFNAME = 'wgmon0';
const CLIENT_IF = 'wgmonc0';
const SERVER_IP = '10.8.9.1';
const LISTEN = '127.0.0.1:18095';
const LISTEN_PORT = 51895;
const PROMETHEUS = '127.0.0.1:19095';
const ADMIN = 'monitoring-admin-token-0123456789';
const READ = 'monitoring-read-token-0123456789';
/** SYSLOG_IDENTIFIER of the daemon's journal lines. */
const IDENT = 'wg-peerd-monitoring';
const JOURNAL_STDOUT = '/run/systemd/journal/stdout';

interface JournalEntry {
  PRIORITY: string;
  MESSAGE: string;
  SYSLOG_IDENTIFIER?: string;
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Polls `probe` every 500 ms until it returns a value, for at most `seconds`. */
async function until<T>(
  what: string,
  seconds: number,
  probe: () => Promise<T | undefined> | T | undefined,
): Promise<T> {
  const deadline = Date.now() + seconds * 1000;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`${what}: not within ${seconds} s`);
    await sleep(500);
  }
}

/** true once a stream connection to the unix socket at `socketPath` is accepted. */
function acceptsConnections(socketPath: string): Promise<true | undefined> {
  return new Promise((resolve) => {
    const socket = net.connect(socketPath);
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(undefined));
  });
}

/** The daemon's journal lines (`journalctl -o json`), with extra journalctl arguments. */
function journal(...args: string[]): JournalEntry[] {
  const run = spawnSync('journalctl', ['--no-pager', '-o', 'json', '-t', IDENT, ...args], {
    encoding: 'utf8',
  });
  expect(run.status, run.stderr).to.equal(0);
  return run.stdout
    .split('\n')
    .filter((line) => line.trim() !== '')
    .map((line) => JSON.parse(line) as JournalEntry);
}

/** A journal line's message as the daemon's JSON. */
function logLine(entry: JournalEntry): Record<string, unknown> {
  return JSON.parse(entry.MESSAGE) as Record<string, unknown>;
}

/** GET on Prometheus' HTTP API; the `data` of a success. */
function prometheus<T>(pathname: string, params: Record<string, string> = {}): Promise<T> {
  const url = new URL(`http://${PROMETHEUS}${pathname}`);
  for (const [name, value] of Object.entries(params)) url.searchParams.set(name, value);
  return new Promise((resolve, reject) => {
    http
      .get(url, { agent: false }, (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => (text += chunk));
        res.on('end', () => {
          try {
            const body = JSON.parse(text) as { status: string; data: T; error?: string };
            if (body.status !== 'success') reject(new Error(`${url.href}: ${text}`));
            else resolve(body.data);
          } catch {
            reject(new Error(`${url.href}: ${res.statusCode ?? 0} ${text}`));
          }
        });
      })
      .on('error', reject);
  });
}

interface Series {
  metric: Record<string, string>;
  value?: [number, string];
  values?: Array<[number, string]>;
}

function instant(query: string): Promise<Series[]> {
  return prometheus<{ result: Series[] }>('/api/v1/query', { query }).then((d) => d.result);
}

describe('monitoring: journald and Prometheus against the real daemon', function () {
  this.timeout(600_000);
  const dir = mkdtempSync(path.join(tmpdir(), 'wg-peerd-monitoring-'));
  const adminFile = path.join(dir, 'admin.tokens');
  let journald: ChildProcess | undefined;
  let prom: ChildProcess | undefined;
  let daemon: DaemonProcess | undefined;
  let publicKey = '';
  let scrapesFrom = 0;

  before(async function () {
    assertInTestVm();
    setupClientNamespace();
    deleteLink(IFNAME);
    // journald keeps its files in /run (the guest's root is read-only); a drop-in, as an
    // operator would write one in /etc/systemd/journald.conf.d.
    mkdirSync('/run/systemd/journald.conf.d', { recursive: true });
    writeFileSync(
      '/run/systemd/journald.conf.d/wg-peerd-test.conf',
      '[Journal]\nStorage=volatile\n',
    );
    // journald exits at once ("Failed to acquire cgroup root path: No medium found") without the
    // cgroup2 hierarchy, which systemd mounts on a real host and the VM's init does not.
    sh('mountpoint -q /sys/fs/cgroup || mount -t cgroup2 none /sys/fs/cgroup');
    const journaldLog = openSync(path.join(dir, 'journald.log'), 'w');
    journald = spawn('/lib/systemd/systemd-journald', [], {
      stdio: ['ignore', journaldLog, journaldLog],
    });
    // The socket file appears at bind(), before journald listens on it: wait for a connection
    // to be accepted (systemd-cat refused with ECONNREFUSED once, on 6.1).
    await until('systemd-journald accepting stream connections', 60, () =>
      existsSync(JOURNAL_STDOUT) ? acceptsConnections(JOURNAL_STDOUT) : undefined,
    );

    // Named tokens: the journal must name them, never show them.
    writeFileSync(adminFile, `ops:${ADMIN}\n`, { mode: 0o600 });
    writeFileSync(path.join(dir, 'read.tokens'), `prometheus:${READ}\n`, { mode: 0o600 });
    writeFileSync(path.join(dir, 'prometheus.token'), READ, { mode: 0o600 });
    daemon = await startDaemon({
      prefix: [
        'systemd-cat',
        '-t',
        IDENT,
        'sh',
        '-c',
        // What systemd does for a service: "<st_dev>:<st_ino>" of the stream on fd 1 (the
        // shell's own fd 1: inside $(...) stat's would be the substitution's pipe).
        'export JOURNAL_STREAM="$(stat -L -c %d:%i /proc/$$/fd/1)"; exec "$0" "$@"',
      ],
      args: [
        '--interface',
        IFNAME,
        '--listen',
        LISTEN,
        '--endpoint-host',
        SERVER_UNDERLAY_IP,
        '--address',
        `${SERVER_IP}/24`,
        '--listen-port',
        String(LISTEN_PORT),
        '--token-file',
        adminFile,
        '--read-token-file',
        path.join(dir, 'read.tokens'),
        // The state directory's checkpoint series, each second (the dashboard shows them).
        '--state-dir',
        path.join(dir, 'state'),
        '--usage-save-interval',
        '1',
      ],
      listen: LISTEN,
      token: READ,
    });
  });

  after(async function () {
    prom?.kill('SIGTERM');
    await daemon?.stop();
    journald?.kill('SIGTERM');
    deleteLink(IFNAME);
    deleteLink(`ifb-${IFNAME}`);
    sh(`nft delete table ip wg_peerd_${IFNAME} 2>/dev/null || true`);
    teardownClientNamespace();
  });

  it('logs each level at its journald priority: journalctl -p warning shows the warning, not the info lines', async () => {
    // A warning the daemon logs on its own: SIGHUP while a token file is readable by others.
    chmodSync(adminFile, 0o644);
    process.kill(daemon!.child.pid!, 'SIGHUP');
    const warnings = await until('the warning in journalctl -p warning', 60, () => {
      const found = journal('-p', 'warning');
      return found.some((e) => e.MESSAGE.includes('keeping the old tokens')) ? found : undefined;
    });
    chmodSync(adminFile, 0o600);
    const warning = warnings.find((e) => e.MESSAGE.includes('keeping the old tokens'))!;
    // syslog.h: LOG_WARNING 4. journald stripped the <4> and kept the JSON line.
    expect(warning.PRIORITY).to.equal('4');
    expect(logLine(warning)).to.include({ level: 40, event: 'tokens_reload_failed' });
    for (const entry of warnings) expect(Number(entry.PRIORITY), entry.MESSAGE).to.be.at.most(4);

    const all = journal();
    const serving = all.find((e) => e.MESSAGE.includes('wg-peerd is serving'));
    expect(serving, 'the start line is in the journal').to.not.equal(undefined);
    expect(serving!.PRIORITY).to.equal('6'); // LOG_INFO
    expect(logLine(serving!)).to.include({ level: 30, event: 'listening' });
    expect(warnings.map((e) => e.MESSAGE)).to.not.include(serving!.MESSAGE);
    console.log(
      `      journal: ${all.length} lines of ${IDENT}, ${warnings.length} at warning or above`,
    );
  });

  it('names the request and the token on change lines in the journal, never the token', async () => {
    const created = await call(daemon!, 'POST', '/api/peer', {
      token: ADMIN,
      headers: { 'x-request-id': 'monitoring-create-1' },
    });
    expect(created.status, created.text).to.equal(201);
    const body = created.json<CreatedPeer>();
    publicKey = body.peer.publicKey;
    const line = await until('peer_created in the journal', 60, () =>
      journal()
        .map(logLine)
        .find((l) => l['event'] === 'peer_created'),
    );
    expect(line).to.include({
      requestId: 'monitoring-create-1',
      tokenName: 'ops',
      publicKey,
      ip: body.peer.ip,
    });
    const text = JSON.stringify(journal());
    expect(text).to.not.contain(ADMIN).and.not.contain(READ).and.not.contain(body.peer.privateKey);

    // A client with a handshake and traffic, a limit and a cap: every panel has something.
    configureClient(body, CLIENT_IF, `${SERVER_IP}/32`);
    ping(CLIENT_NS, SERVER_IP);
    const key = encodeURIComponent(publicKey);
    for (const [route, change] of [
      ['speed-limit', { bytesPerSecond: 1_000_000 }],
      ['data-cap', { quotaBytes: 1_000_000_000 }],
    ] as const) {
      const reply = await call(daemon!, 'PATCH', `/api/peer/${key}/${route}`, {
        body: change,
        token: ADMIN,
      });
      expect(reply.status, reply.text).to.equal(200);
    }
  });

  it('is scraped by a real Prometheus with the alert rules loaded, which evaluate without error', async () => {
    const config = {
      global: { scrape_interval: '1s', evaluation_interval: '1s' },
      rule_files: [RULES_FILE],
      scrape_configs: [
        {
          job_name: 'wg-peerd',
          authorization: {
            type: 'Bearer',
            credentials_file: path.join(dir, 'prometheus.token'),
          },
          static_configs: [{ targets: [LISTEN] }],
        },
      ],
    };
    const configFile = path.join(dir, 'prometheus.yml');
    writeFileSync(configFile, JSON.stringify(config)); // JSON is YAML
    const log = openSync(path.join(dir, 'prometheus.log'), 'w');
    scrapesFrom = Math.floor(Date.now() / 1000);
    prom = spawn(
      'prometheus',
      [
        `--config.file=${configFile}`,
        `--storage.tsdb.path=${path.join(dir, 'tsdb')}`,
        `--web.listen-address=${PROMETHEUS}`,
      ],
      { stdio: ['ignore', log, log] },
    );
    // Ten good scrapes, with traffic through the tunnel meanwhile.
    await until('10 scrapes of the daemon', 240, async () => {
      ping(CLIENT_NS, SERVER_IP);
      const up = await instant('sum_over_time(up{job="wg-peerd"}[5m])').catch(() => []);
      return Number(up[0]?.value?.[1] ?? 0) >= 10 ? true : undefined;
    });
    const rules = await prometheus<{
      groups: Array<{ rules: Array<{ name: string; health: string; lastError?: string }> }>;
    }>('/api/v1/rules');
    const loaded = rules.groups.flatMap((g) => g.rules);
    const written = readFileSync(RULES_FILE, 'utf8').match(/^\s*- alert:/gm) ?? [];
    expect(loaded).to.have.length(written.length);
    for (const rule of loaded) {
      expect(rule.health, `${rule.name}: ${rule.lastError ?? ''}`).to.equal('ok');
    }
  });

  it('alerts on kernel errors and readiness once the interface is deleted behind its back', async () => {
    deleteLink(IFNAME);
    const firing = await until(
      'WgPeerdKernelErrors firing, WgPeerdNotReady pending',
      240,
      async () => {
        const { alerts } = await prometheus<{
          alerts: Array<{ labels: Record<string, string>; state: string }>;
        }>('/api/v1/alerts');
        const kernel = alerts.find((a) => a.labels['alertname'] === 'WgPeerdKernelErrors');
        const ready = alerts.find((a) => a.labels['alertname'] === 'WgPeerdNotReady');
        return kernel?.state === 'firing' && ready !== undefined ? { kernel, ready } : undefined;
      },
    );
    console.log(
      `      alerts: WgPeerdKernelErrors ${firing.kernel.labels['facility']} ` +
        `${firing.kernel.labels['code']}; WgPeerdNotReady ${firing.ready.state}`,
    );
    const checks = await instant('wg_peerd_readiness_check{job="wg-peerd"} == 0');
    expect(checks.map((s) => s.metric['check'])).to.include('interface');
    // Two more scrapes, so that increase() over the new error series has its two samples.
    await sleep(3000);
  });

  it('answers every query of the Grafana dashboard with series', async () => {
    const end = Math.floor(Date.now() / 1000);
    const vars = { job: 'wg-peerd', instance: LISTEN, rateInterval: '15s' };
    const empty: string[] = [];
    let queries = 0;
    for (const target of targetsOf(readDashboard())) {
      const query = fillVariables(target.expr, vars);
      const data = await prometheus<{ result: Series[] }>('/api/v1/query_range', {
        query,
        start: String(scrapesFrom),
        end: String(end),
        step: '1',
      });
      queries += 1;
      if (data.result.length === 0) empty.push(`${target.panel} ${target.refId}: ${query}`);
    }
    expect(empty, 'dashboard queries without series').to.deep.equal([]);
    // The variables' own queries (label_values) find this daemon too.
    const jobs = await prometheus<string[]>('/api/v1/label/job/values', {
      'match[]': 'wg_peerd_build_info',
    });
    expect(jobs).to.deep.equal(['wg-peerd']);
    const instances = await prometheus<string[]>('/api/v1/label/instance/values', {
      'match[]': 'wg_peerd_build_info{job="wg-peerd"}',
    });
    expect(instances).to.deep.equal([LISTEN]);
    console.log(
      `      ${queries} dashboard queries, each with series, over ${end - scrapesFrom} s`,
    );
  });
});
