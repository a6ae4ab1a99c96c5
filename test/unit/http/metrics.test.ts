/**
 * GET /metrics (issue 9, DESIGN §3 "Observability"): per-peer values against a snapshot whose
 * figures the test chose, aggregates, label escaping, --metrics-per-peer=false, the daemon's own
 * metrics, `promtool check metrics` on real output of the app, and one kernel read for a scrape
 * and a list at the same time.
 */
import { expect } from 'chai';
import { spawnSync } from 'node:child_process';
import express from 'express';
import request from 'supertest';
import { TokenStore } from '../../../src/http';
import { createApp } from '../../../src/http/app';
import {
  METRICS_CONTENT_TYPE,
  createMetrics,
  escapeLabelValue,
  renderPeerMetrics,
} from '../../../src/http/metrics';
import type { IpPrefix, WireGuardPeer } from '../../../src/kernel/types';
import { PeerService, type PeerSnapshot } from '../../../src/peers';
import { parseSamples, samplesOf, valueOf, type Sample } from '../../support/prom-text';
import { FakeKernel, netlinkError } from '../support/fake-kernel';
import { captureLog } from '../support/log-capture';
import { NOW, encoded, key } from './helpers';

function prefix(text: string): IpPrefix {
  const [address, cidr] = text.split('/');
  return {
    family: address!.includes(':') ? 6 : 4,
    address: address!,
    cidr: Number(cidr),
  } as IpPrefix;
}

function peer(
  publicKey: string,
  allowedIps: string[],
  extra: Partial<WireGuardPeer> = {},
): WireGuardPeer {
  return {
    publicKey,
    endpoint: null,
    lastHandshake: null,
    rxBytes: 0,
    txBytes: 0,
    persistentKeepalive: 0,
    allowedIps: allowedIps.map(prefix),
    ...extra,
  };
}

/** Four peers: alive + limited + exhausted cap, dead + capped, never, and one without an IPv4 /32. */
function snapshotOf(peers: WireGuardPeer[], overrides: Partial<PeerSnapshot> = {}): PeerSnapshot {
  return {
    takenAt: NOW,
    readMs: 1,
    device: { name: 'wg0', ifindex: 3, publicKey: null, listenPort: 51820, fwmark: 0, peers },
    limits: new Map([['10.8.0.2', { download: 250_000, upload: 250_000 }]]),
    caps: new Map([
      ['10.8.0.2', { quotaBytes: 1000, usedBytes: 1000, enforced: true }],
      ['10.8.0.3', { quotaBytes: 5000, usedBytes: 10, enforced: true }],
    ]),
    ...overrides,
  };
}

const A = key(1);
const B = key(2);
const C = key(3);
const D = key(4);
const HANDSHAKE_A = new Date(NOW - 60_000); // 1 minute: alive
const HANDSHAKE_B = new Date(NOW - 600_000); // 10 minutes: dead

const PEERS = [
  peer(A, ['10.8.0.2/32'], { lastHandshake: HANDSHAKE_A, rxBytes: 1234, txBytes: 5678 }),
  peer(B, ['10.8.0.3/32'], { lastHandshake: HANDSHAKE_B, rxBytes: 2 ** 40, txBytes: 0 }),
  peer(C, ['10.8.0.4/32']),
  peer(D, ['fd00::5/128'], { rxBytes: 9, txBytes: 8 }),
];

/** An app with only /metrics in front of a fake service answering with `snapshot()`. */
function scrapeApp(snapshot: () => Promise<PeerSnapshot>, perPeer = true, now = () => NOW) {
  const metrics = createMetrics({ service: { snapshot }, perPeer, now, processMetrics: false });
  const app = express();
  app.get('/metrics', metrics.handler);
  return { metrics, http: request(app) };
}

async function scrape(http: ReturnType<typeof request>): Promise<Sample[]> {
  const res = await http.get('/metrics');
  expect(res.status).to.equal(200);
  expect(res.headers['content-type']).to.equal(METRICS_CONTENT_TYPE);
  return parseSamples(res.text);
}

describe('metrics: per-peer series from the snapshot', () => {
  let samples: Sample[];
  before(async () => {
    const snapshot = snapshotOf(PEERS);
    samples = await scrape(scrapeApp(async () => snapshot).http);
  });
  const labels = (publicKey: string, ip: string) => ({ public_key: publicKey, ip });

  it('gives the last handshake as UNIX seconds, and no handshake series for a peer that never had one', () => {
    const name = 'wg_peerd_peer_last_handshake_timestamp_seconds';
    expect(valueOf(samples, name, labels(A, '10.8.0.2'))).to.equal(HANDSHAKE_A.getTime() / 1000);
    expect(valueOf(samples, name, labels(B, '10.8.0.3'))).to.equal(HANDSHAKE_B.getTime() / 1000);
    expect(samplesOf(samples, name, { public_key: C })).to.deep.equal([]);
    expect(samplesOf(samples, name, { public_key: D })).to.deep.equal([]);
  });

  it('gives each peer one status series, as the list computes it (150 s threshold)', () => {
    const status = (publicKey: string) =>
      samplesOf(samples, 'wg_peerd_peer_status', { public_key: publicKey }).map((s) => [
        s.labels.status,
        s.value,
      ]);
    expect(status(A)).to.deep.equal([['alive', 1]]);
    expect(status(B)).to.deep.equal([['dead', 1]]);
    expect(status(C)).to.deep.equal([['never', 1]]);
    expect(status(D)).to.deep.equal([['never', 1]]);
  });

  it('gives rx and tx bytes as counters, for every peer', () => {
    expect(valueOf(samples, 'wg_peerd_peer_receive_bytes_total', labels(A, '10.8.0.2'))).to.equal(
      1234,
    );
    expect(valueOf(samples, 'wg_peerd_peer_transmit_bytes_total', labels(A, '10.8.0.2'))).to.equal(
      5678,
    );
    expect(valueOf(samples, 'wg_peerd_peer_receive_bytes_total', labels(B, '10.8.0.3'))).to.equal(
      2 ** 40,
    );
    // A peer without an IPv4 /32 keeps the ip label, empty.
    expect(valueOf(samples, 'wg_peerd_peer_receive_bytes_total', labels(D, ''))).to.equal(9);
    expect(valueOf(samples, 'wg_peerd_peer_transmit_bytes_total', labels(D, ''))).to.equal(8);
  });

  it("names each peer's IPv6 /128 in one info series, and nothing for an IPv4-only peer (issue 18)", async () => {
    const dual = peer(A, ['10.8.0.2/32', 'fd42::2/128']);
    const snapshot = snapshotOf([dual, peer(B, ['10.8.0.3/32'])]);
    const scraped = await scrape(scrapeApp(async () => snapshot).http);
    expect(samplesOf(scraped, 'wg_peerd_peer_ipv6_info', {})).to.deep.equal([
      {
        name: 'wg_peerd_peer_ipv6_info',
        labels: { ...labels(A, '10.8.0.2'), ipv6: 'fd42::2' },
        value: 1,
      },
    ]);
    // A peer with an IPv6 /128 and no IPv4 /32 (added by other tools) keeps ip="".
    expect(samplesOf(samples, 'wg_peerd_peer_ipv6_info', {})).to.deep.equal([
      { name: 'wg_peerd_peer_ipv6_info', labels: { ...labels(D, ''), ipv6: 'fd00::5' }, value: 1 },
    ]);
  });

  it('gives the speed limit per direction that holds, only for a limited peer', () => {
    const name = 'wg_peerd_peer_speed_limit_bytes_per_second';
    for (const direction of ['download', 'upload']) {
      expect(valueOf(samples, name, { ...labels(A, '10.8.0.2'), direction })).to.equal(250_000);
    }
    expect(samplesOf(samples, name)).to.have.length(2);
  });

  it('gives a limit that holds one way only as that direction alone', async () => {
    const snapshot = snapshotOf(PEERS, {
      limits: new Map([['10.8.0.2', { download: null, upload: 250_000 }]]),
    });
    const oneWay = await scrape(scrapeApp(async () => snapshot).http);
    const name = 'wg_peerd_peer_speed_limit_bytes_per_second';
    expect(samplesOf(oneWay, name).map((s) => s.labels.direction)).to.deep.equal(['upload']);
  });

  it('gives cap, bytes used and exhausted (used >= cap) only for capped peers', () => {
    expect(valueOf(samples, 'wg_peerd_peer_data_cap_bytes', labels(A, '10.8.0.2'))).to.equal(1000);
    expect(valueOf(samples, 'wg_peerd_peer_data_cap_used_bytes', labels(A, '10.8.0.2'))).to.equal(
      1000,
    );
    expect(valueOf(samples, 'wg_peerd_peer_data_cap_exhausted', labels(A, '10.8.0.2'))).to.equal(1);
    expect(valueOf(samples, 'wg_peerd_peer_data_cap_bytes', labels(B, '10.8.0.3'))).to.equal(5000);
    expect(valueOf(samples, 'wg_peerd_peer_data_cap_used_bytes', labels(B, '10.8.0.3'))).to.equal(
      10,
    );
    expect(valueOf(samples, 'wg_peerd_peer_data_cap_exhausted', labels(B, '10.8.0.3'))).to.equal(0);
    for (const name of ['wg_peerd_peer_data_cap_bytes', 'wg_peerd_peer_data_cap_exhausted']) {
      expect(samplesOf(samples, name)).to.have.length(2);
    }
  });

  it('says per capped peer whether it is throttled now (a cap that throttles, used up), and counts them', async () => {
    const snapshot = snapshotOf(PEERS, {
      caps: new Map([
        [
          '10.8.0.2',
          {
            quotaBytes: 1000,
            usedBytes: 1000,
            enforced: true,
            throttleBytesPerSecond: 5000,
            throttled: true,
          },
        ],
        // Throttles too, but not used up yet.
        [
          '10.8.0.3',
          {
            quotaBytes: 5000,
            usedBytes: 10,
            enforced: true,
            throttleBytesPerSecond: 5000,
            throttled: false,
          },
        ],
      ]),
    });
    const scraped = await scrape(scrapeApp(async () => snapshot).http);
    const name = 'wg_peerd_peer_data_cap_throttled';
    expect(valueOf(scraped, name, labels(A, '10.8.0.2'))).to.equal(1);
    expect(valueOf(scraped, name, labels(B, '10.8.0.3'))).to.equal(0);
    expect(samplesOf(scraped, name)).to.have.length(2);
    expect(valueOf(scraped, 'wg_peerd_peers_data_cap_throttled')).to.equal(1);
    // Caps that block are never throttled.
    expect(valueOf(samples, name, labels(A, '10.8.0.2'))).to.equal(0);
    expect(valueOf(samples, 'wg_peerd_peers_data_cap_throttled')).to.equal(0);
  });

  it('says per peer whether it is suspended (only by a suspension its own key holds), and counts them', async () => {
    const snapshot = snapshotOf(PEERS, {
      suspended: new Map([
        ['10.8.0.2', A],
        ['10.8.0.3', C], // B's address, another key's suspension: not B's
      ]),
    });
    const scraped = await scrape(scrapeApp(async () => snapshot).http);
    const name = 'wg_peerd_peer_suspended';
    expect(valueOf(scraped, name, labels(A, '10.8.0.2'))).to.equal(1);
    expect(valueOf(scraped, name, labels(B, '10.8.0.3'))).to.equal(0);
    expect(valueOf(scraped, name, labels(C, '10.8.0.4'))).to.equal(0);
    expect(samplesOf(scraped, name)).to.have.length(4);
    expect(valueOf(scraped, 'wg_peerd_peers_suspended')).to.equal(1);
    expect(valueOf(samples, 'wg_peerd_peers_suspended')).to.equal(0);
  });

  it('gives per peer the UNIX time it expires (only peers with an expiry), and counts the expired ones (issue 31)', async () => {
    const snapshot = snapshotOf(PEERS, {
      expiries: new Map([
        [A, Date.parse('2026-12-31T23:59:59.500Z')],
        [B, Date.parse('2026-01-01T00:00:00.000Z')],
      ]),
      expired: new Set([B]),
    });
    const scraped = await scrape(scrapeApp(async () => snapshot).http);
    const name = 'wg_peerd_peer_expires_at_timestamp_seconds';
    expect(valueOf(scraped, name, labels(A, '10.8.0.2'))).to.equal(1798761599);
    expect(valueOf(scraped, name, labels(B, '10.8.0.3'))).to.equal(1767225600);
    expect(samplesOf(scraped, name)).to.have.length(2);
    expect(valueOf(scraped, 'wg_peerd_peers_expired')).to.equal(1);
    expect(valueOf(samples, 'wg_peerd_peers_expired')).to.equal(0);
  });

  it('counts peers by status, limited, capped and exhausted peers', () => {
    expect(valueOf(samples, 'wg_peerd_peers', { status: 'alive' })).to.equal(1);
    expect(valueOf(samples, 'wg_peerd_peers', { status: 'dead' })).to.equal(1);
    expect(valueOf(samples, 'wg_peerd_peers', { status: 'never' })).to.equal(2);
    expect(valueOf(samples, 'wg_peerd_peers_speed_limited')).to.equal(1);
    expect(valueOf(samples, 'wg_peerd_peers_data_capped')).to.equal(2);
    expect(valueOf(samples, 'wg_peerd_peers_data_cap_exhausted')).to.equal(1);
  });

  // Issue 17: a cap or limit the kernel lost must not be exported as if it were enforced.
  it('says per peer whether its cap and each direction of its limit are enforced', () => {
    const name = 'wg_peerd_peer_speed_limit_enforced';
    for (const direction of ['download', 'upload']) {
      expect(valueOf(samples, name, { ...labels(A, '10.8.0.2'), direction })).to.equal(1);
    }
    expect(samplesOf(samples, name)).to.have.length(2);
    const enforced = 'wg_peerd_peer_data_cap_enforced';
    expect(valueOf(samples, enforced, labels(A, '10.8.0.2'))).to.equal(1);
    expect(valueOf(samples, enforced, labels(B, '10.8.0.3'))).to.equal(1);
    expect(samplesOf(samples, enforced)).to.have.length(2);
    expect(valueOf(samples, 'wg_peerd_peers_speed_limit_not_enforced')).to.equal(0);
    expect(valueOf(samples, 'wg_peerd_peers_data_cap_not_enforced')).to.equal(0);
  });

  it('gives a lost cap as not enforced and not exhausted, and a limit lost one way as 0 there', async () => {
    // As the service lists them: a cap the kernel lost, last seen used up; an upload limit lost.
    const snapshot = snapshotOf(PEERS, {
      limits: new Map([['10.8.0.2', { download: 250_000, upload: null }]]),
      caps: new Map([
        ['10.8.0.2', { quotaBytes: 1000, usedBytes: 1000, enforced: false }],
        ['10.8.0.3', { quotaBytes: 5000, usedBytes: 10, enforced: true }],
      ]),
    });
    const lost = await scrape(scrapeApp(async () => snapshot).http);
    const a = labels(A, '10.8.0.2');
    expect(valueOf(lost, 'wg_peerd_peer_data_cap_enforced', a)).to.equal(0);
    expect(valueOf(lost, 'wg_peerd_peer_data_cap_exhausted', a)).to.equal(0);
    expect(valueOf(lost, 'wg_peerd_peer_data_cap_bytes', a)).to.equal(1000);
    const limit = 'wg_peerd_peer_speed_limit_enforced';
    expect(valueOf(lost, limit, { ...a, direction: 'download' })).to.equal(1);
    expect(valueOf(lost, limit, { ...a, direction: 'upload' })).to.equal(0);
    expect(valueOf(lost, 'wg_peerd_peers_data_cap_exhausted')).to.equal(0);
    expect(valueOf(lost, 'wg_peerd_peers_data_cap_not_enforced')).to.equal(1);
    expect(valueOf(lost, 'wg_peerd_peers_speed_limit_not_enforced')).to.equal(1);
    expect(valueOf(lost, 'wg_peerd_peers_data_capped')).to.equal(2);
  });

  it('gives the snapshot age at the scrape in seconds', async () => {
    const snapshot = snapshotOf(PEERS, { takenAt: NOW - 2500 });
    const aged = await scrape(scrapeApp(async () => snapshot).http);
    expect(valueOf(aged, 'wg_peerd_snapshot_age_seconds')).to.equal(2.5);
    expect(valueOf(aged, 'wg_peerd_snapshot_up')).to.equal(1);
  });
});

describe('metrics: text format', () => {
  it('escapes backslash, double quote and line feed in label values (exposition format 0.0.4)', () => {
    expect(escapeLabelValue('a\\b"c\nd')).to.equal('a\\\\b\\"c\\nd');
    expect(escapeLabelValue('hS5k/ab+c=')).to.equal('hS5k/ab+c=');
  });

  it('writes a label value with those characters so that it reads back unchanged', async () => {
    const odd = 'x\\y"z\nw';
    const snapshot = snapshotOf([peer(odd, ['10.8.0.9/32'])]);
    const { http } = scrapeApp(async () => snapshot);
    const res = await http.get('/metrics');
    expect(res.text).to.contain('public_key="x\\\\y\\"z\\nw"');
    const samples = parseSamples(res.text);
    expect(valueOf(samples, 'wg_peerd_peer_receive_bytes_total', { public_key: odd })).to.equal(0);
  });

  it('has HELP and TYPE for every family it writes', async () => {
    const snapshot = snapshotOf(PEERS);
    const res = await scrapeApp(async () => snapshot).http.get('/metrics');
    const names = new Set(
      parseSamples(res.text).map((s) => s.name.replace(/_(bucket|sum|count)$/, '')),
    );
    for (const name of names) {
      expect(res.text, name).to.match(new RegExp(`^# HELP ${name} \\S`, 'm'));
      expect(res.text, name).to.match(
        new RegExp(`^# TYPE ${name} (gauge|counter|histogram)$`, 'm'),
      );
    }
  });
});

describe('metrics: --metrics-per-peer=false', () => {
  it('drops every per-peer series and keeps the aggregates', async () => {
    const snapshot = snapshotOf(PEERS);
    const samples = await scrape(scrapeApp(async () => snapshot, false).http);
    expect(samples.filter((s) => s.name.startsWith('wg_peerd_peer_'))).to.deep.equal([]);
    expect(samples.filter((s) => 'public_key' in s.labels)).to.deep.equal([]);
    expect(valueOf(samples, 'wg_peerd_peers', { status: 'never' })).to.equal(2);
    expect(valueOf(samples, 'wg_peerd_peers_data_cap_exhausted')).to.equal(1);
  });
});

describe('metrics: rendering cost', () => {
  it('lets the event loop run every 1,000 peers while rendering, with the same text', async () => {
    const many = Array.from({ length: 2500 }, (_, i) =>
      peer(`key-${i}`, [`10.9.${i >> 8}.${i & 255}/32`], { rxBytes: i }),
    );
    const snapshot = snapshotOf(many);
    let pauses = 0;
    const chunks = await renderPeerMetrics(snapshot, true, async () => {
      pauses += 1;
    });
    const text = Buffer.concat(chunks).toString('utf8');
    expect(pauses).to.equal(2);
    const samples = parseSamples(text);
    expect(samplesOf(samples, 'wg_peerd_peer_receive_bytes_total')).to.have.length(2500);
    expect(
      valueOf(samples, 'wg_peerd_peer_receive_bytes_total', { public_key: 'key-2499' }),
    ).to.equal(2499);
    expect(valueOf(samples, 'wg_peerd_peers', { status: 'never' })).to.equal(2500);
  });

  it('renders one snapshot once, however many scrapes share it', async () => {
    let reads = 0;
    const snapshot = snapshotOf([]);
    const device = { ...snapshot.device };
    Object.defineProperty(device, 'peers', {
      get: () => {
        reads += 1;
        return PEERS;
      },
    });
    const shared: PeerSnapshot = { ...snapshot, device };
    const { http } = scrapeApp(async () => shared);
    const first = (await http.get('/metrics')).text;
    // The peer series walk the peers once, and so do the interface's byte totals.
    expect(reads).to.equal(2);
    const second = (await http.get('/metrics')).text;
    expect(reads).to.equal(2);
    expect(second).to.equal(first);
  });
});

/** The real app: a PeerService over the fake kernel, with the metrics wired as main.ts does. */
function daemonApp(
  kernel: FakeKernel,
  options: { tokens?: { admin: string[]; read: string[] }; onSnapshot?: () => void } = {},
) {
  const log = captureLog();
  const metrics = createMetrics({
    service: {
      snapshot: () => {
        options.onSnapshot?.();
        return service.snapshot(); // called at a scrape, once service exists
      },
    },
    perPeer: true,
    now: () => NOW,
  });
  const service = new PeerService({
    kernel,
    interfaceName: 'wg0',
    endpointHost: 'vpn.example.net',
    logger: log.logger,
    now: () => NOW,
    observer: metrics.observer,
  });
  const tokens = options.tokens ? new TokenStore(options.tokens) : null;
  const app = createApp({ service, tokens, logger: log.logger, metrics });
  return { service, metrics, http: request(app) };
}

async function until(condition: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 1000; i += 1) {
    if (condition()) return;
    await new Promise((resolve) => setTimeout(resolve, 1));
  }
  throw new Error(`never happened: ${what}`);
}

describe('metrics: the daemon app', () => {
  it('serves output that `promtool check metrics` accepts (promtool is required)', async () => {
    const kernel = FakeKernel.withInterface();
    kernel.putPeer(key(9), ['10.8.0.9/32'], { lastHandshake: new Date(NOW - 1000), rxBytes: 5 });
    const { http } = daemonApp(kernel);
    expect((await http.post('/api/peer')).status).to.equal(201);
    const k = encoded(key(9));
    const limited = await http.patch(`/api/peer/${k}/speed-limit`).send({ bytesPerSecond: 5000 });
    expect(limited.status).to.equal(200);
    const capped = await http.patch(`/api/peer/${k}/data-cap`).send({ quotaBytes: 100 });
    expect(capped.status).to.equal(200);
    kernel.setUsed('10.8.0.9', 100);
    expect((await http.get('/api/peers')).status).to.equal(200);
    expect((await http.get('/api/nothing-here')).status).to.equal(404);
    kernel.fail('getDevice', netlinkError('EPERM', 'WG_CMD_GET_DEVICE', 'not permitted'));
    expect((await http.get('/api/peers')).status).to.not.equal(200);
    const res = await http.get('/metrics');
    expect(res.status).to.equal(200);
    const result = spawnSync('promtool', ['check', 'metrics'], {
      input: res.text,
      encoding: 'utf8',
    });
    expect(
      result.error,
      'promtool is missing: install the Debian package prometheus (it provides promtool)',
    ).to.equal(undefined);
    expect(result.status, `${result.stdout}${result.stderr}`).to.equal(0);
    // Real output: the process metrics and the daemon's own families are in it too.
    const samples = parseSamples(res.text);
    expect(samplesOf(samples, 'process_cpu_user_seconds_total')).to.have.length(1);
    expect(samplesOf(samples, 'wg_peerd_kernel_errors_total')).to.have.length(1);
    expect(valueOf(samples, 'wg_peerd_peer_data_cap_exhausted', { public_key: key(9) })).to.equal(
      1,
    );
  });

  it('answers a scrape and a list at the same time from one kernel read', async () => {
    const kernel = FakeKernel.withInterface();
    kernel.putPeer(key(9), ['10.8.0.9/32'], { txBytes: 77 });
    let scrapes = 0;
    const { http } = daemonApp(kernel, { onSnapshot: () => (scrapes += 1) });
    const release = kernel.hold('getDevice');
    const list = http.get('/api/peers').then((r) => r);
    await until(() => kernel.count('getDevice') === 1, 'the list reads the device');
    const scrape = http.get('/metrics').then((r) => r);
    await until(() => scrapes === 1, 'the scrape asks for the snapshot while the read is held');
    release();
    const [listed, scraped] = await Promise.all([list, scrape]);
    expect(listed.status).to.equal(200);
    expect(scraped.status).to.equal(200);
    expect(kernel.count('getDevice')).to.equal(1);
    const samples = parseSamples(scraped.text);
    expect(
      valueOf(samples, 'wg_peerd_kernel_read_duration_seconds_count', { result: 'ok' }),
    ).to.equal(1);
    expect(valueOf(samples, 'wg_peerd_peer_transmit_bytes_total', { public_key: key(9) })).to.equal(
      (listed.body as { peers: Array<{ tx_bytes: number }> }).peers[0]!.tx_bytes,
    );
  });

  it('still serves its own metrics when the kernel read fails, counting the failure', async () => {
    const kernel = FakeKernel.withInterface();
    kernel.putPeer(key(9), ['10.8.0.9/32']);
    const { http } = daemonApp(kernel);
    kernel.fail('getDevice', netlinkError('EPERM', 'WG_CMD_GET_DEVICE', 'not permitted'), false);
    const listed = await http.get('/api/peers');
    const code = (listed.body as { code: string }).code;
    const res = await http.get('/metrics');
    expect(res.status).to.equal(200);
    const samples = parseSamples(res.text);
    expect(valueOf(samples, 'wg_peerd_snapshot_up')).to.equal(0);
    // One failed read for the list, one for the scrape, each counted under the list's own code.
    expect(
      valueOf(samples, 'wg_peerd_kernel_errors_total', { facility: 'wireguard', code }),
    ).to.equal(2);
    expect(
      valueOf(samples, 'wg_peerd_kernel_read_duration_seconds_count', { result: 'error' }),
    ).to.equal(2);
    expect(samples.filter((s) => s.name.startsWith('wg_peerd_peer'))).to.deep.equal([]);
  });

  it('times requests by route pattern and status, never by a path holding a key', async () => {
    const kernel = FakeKernel.withInterface();
    kernel.putPeer(key(9), ['10.8.0.9/32']);
    const { http } = daemonApp(kernel);
    const k = encoded(key(9));
    await http.patch(`/api/peer/${k}/speed-limit`).send({ bytesPerSecond: 5000 });
    await http.delete(`/api/peer/${encoded(key(8))}`);
    await http.get('/nowhere');
    await http.get('/healthz');
    const res = await http.get('/metrics');
    const counts = samplesOf(
      parseSamples(res.text),
      'wg_peerd_http_request_duration_seconds_count',
    );
    expect(
      counts.map((s) => [s.labels.method, s.labels.route, s.labels.code, s.value]),
    ).to.deep.equal([
      ['PATCH', '/api/peer/:publicKey/speed-limit', '200', 1],
      ['DELETE', '/api/peer/:publicKey', '404', 1],
      ['GET', 'unmatched', '404', 1],
      ['GET', '/healthz', '200', 1],
    ]);
  });

  it('puts /metrics behind the read scope: a read or admin token, nothing without one', async () => {
    const { http } = daemonApp(FakeKernel.withInterface(), {
      tokens: { admin: ['admin-token-0123456789'], read: ['read-token-0123456789'] },
    });
    expect((await http.get('/metrics')).status).to.equal(401);
    for (const token of ['read-token-0123456789', 'admin-token-0123456789']) {
      const res = await http.get('/metrics').set('Authorization', `Bearer ${token}`);
      expect(res.status).to.equal(200);
    }
  });
});
