/**
 * GET /metrics against a real kernel (issue 9, Done-when 2): `npm start`, a real client through
 * the tunnel, a download a data cap cuts off, then the scrape compared with `wg show <if> dump`
 * and `nft -j` (the independent oracles), checked by `promtool check metrics`, and the kernel
 * reads a concurrent scrape and list cost, counted by the daemon's own read histogram.
 */
import { expect } from 'chai';
import { spawn, spawnSync } from 'node:child_process';
import * as net from 'node:net';
import { type Sample, parseSamples, valueOf } from '../support/prom-text';
import {
  type CreatedPeer,
  type DaemonProcess,
  call,
  configureClient,
  scrape,
  startDaemon,
} from './support/daemon';
import {
  CLIENT_NS,
  SERVER_UNDERLAY_IP,
  assertInTestVm,
  ping,
  removeDaemonLeftovers,
  setupClientNamespace,
  sh,
  teardownClientNamespace,
  wgShowDump,
} from './support/topology';

const IFNAME = 'wgm0';
const CLIENT_IF = 'wgmc0';
const SERVER_IP = '10.8.7.1';
const LISTEN = '127.0.0.1:18090';
const LISTEN_PORT = 51890;
const TOKEN = 'metrics-test-token-0123456789';
const TCP_PORT = 5290;
const LIMIT = 5_000_000;
const CAP = 1_000_000;
/** More than the cap, so the cap is what ends the download. */
const DOWNLOAD = 3_000_000;
const IDLE_MS = 3000;
// --list-max-age 0: reads are shared only while in flight, so the read counts below are exact
// (with the default window, scrapes a few hundred ms apart would share one read too).
const DAEMON_ARGS = [
  '--list-max-age',
  '0',
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
];

/** Client side: reads from the server until it ends or goes idle; prints the bytes received. */
const CLIENT_SCRIPT = `
const net = require('net');
const [host, port, idleMs] = process.argv.slice(1);
let received = 0;
let timer;
const done = () => { process.stdout.write(String(received)); process.exit(0); };
const idle = () => { clearTimeout(timer); timer = setTimeout(() => { socket.destroy(); done(); }, Number(idleMs)); };
const socket = net.connect(Number(port), host);
socket.on('data', (chunk) => { received += chunk.length; idle(); });
socket.on('end', done);
socket.on('error', done);
idle();
`;

/** Kernel reads so far: the _count of the read-duration histogram, both results. */
function reads(samples: Sample[]): number {
  return samples
    .filter((s) => s.name === 'wg_peerd_kernel_read_duration_seconds_count')
    .reduce((sum, s) => sum + s.value, 0);
}

/** Runs the client script in the client namespace; resolves with the bytes it received. */
function download(): Promise<number> {
  return new Promise((resolve, reject) => {
    const child = spawn(
      'ip',
      [
        'netns',
        'exec',
        CLIENT_NS,
        process.execPath,
        '-e',
        CLIENT_SCRIPT,
        SERVER_IP,
        String(TCP_PORT),
        String(IDLE_MS),
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    let stdout = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.on('error', reject);
    child.on('close', () => resolve(Number(stdout)));
  });
}

/** The quota object nft holds for the peer: {bytes, used}. */
function nftQuota(): { bytes: number; used: number } {
  const entries = (
    JSON.parse(sh(`nft -j list table ip wg_peerd_${IFNAME}`)) as {
      nftables: Array<{ quota?: { bytes: number; used: number } }>;
    }
  ).nftables.flatMap((e) => (e.quota === undefined ? [] : [e.quota]));
  expect(entries, 'one quota object').to.have.length(1);
  return entries[0]!;
}

describe('metrics end to end (real kernel, npm start)', function () {
  // The daemon's start alone took over 120 s in a VM sharing the machine's 2 cores.
  this.timeout(400_000);
  let daemon: DaemonProcess | undefined;
  let server: net.Server | undefined;
  let created: CreatedPeer;

  before(function () {
    assertInTestVm();
    setupClientNamespace();
    removeDaemonLeftovers(IFNAME);
  });

  after(async function () {
    server?.close();
    await daemon?.stop();
    removeDaemonLeftovers(IFNAME);
    teardownClientNamespace();
  });

  it('serves a client whose download a data cap cuts off', async () => {
    daemon = await startDaemon({
      args: DAEMON_ARGS,
      env: { WG_PEERD_TOKEN: TOKEN },
      listen: LISTEN,
      token: TOKEN,
    });
    const response = await call(daemon, 'POST', '/api/peer', { token: TOKEN });
    expect(response.status, response.text).to.equal(201);
    created = response.json<CreatedPeer>();
    configureClient(created, CLIENT_IF, `${SERVER_IP}/32`);
    ping(CLIENT_NS, SERVER_IP);

    const key = encodeURIComponent(created.peer.publicKey);
    const limit = await call(daemon, 'PATCH', `/api/peer/${key}/speed-limit`, {
      body: { bytesPerSecond: LIMIT },
      token: TOKEN,
    });
    expect(limit.status, limit.text).to.equal(200);
    const cap = await call(daemon, 'PATCH', `/api/peer/${key}/data-cap`, {
      body: { quotaBytes: CAP },
      token: TOKEN,
    });
    expect(cap.status, cap.text).to.equal(200);

    server = net.createServer((socket) => {
      socket.on('error', () => socket.destroy());
      socket.end(Buffer.alloc(DOWNLOAD, 0xaa));
    });
    await new Promise<void>((resolve) => server!.listen(TCP_PORT, SERVER_IP, resolve));
    const delivered = await download();
    console.log(`      download of ${DOWNLOAD}: ${delivered} bytes arrived before the cap cut it`);
    expect(delivered).to.be.above(0).and.below(CAP);
    expect(nftQuota(), 'nft: the quota is used up').to.deep.include({ bytes: CAP, used: CAP });
  });

  it('shows the handshake, rx/tx as wg show reports them, the limit, the cap, the bytes used and exhausted = 1', async () => {
    // Counters only grow: a scrape between two dumps lies between their values, which is as
    // close as two separate reads can be compared (no tolerance to pick; nothing should move
    // anyway, since the cap drops the client's traffic).
    const before = wgShowDump(IFNAME).peers.find((p) => p.publicKey === created.peer.publicKey)!;
    const { text, headers } = await scrape(daemon!, TOKEN);
    const after = wgShowDump(IFNAME).peers.find((p) => p.publicKey === created.peer.publicKey)!;
    expect(headers.get('content-type')).to.equal('text/plain; version=0.0.4; charset=utf-8');
    const samples = parseSamples(text);
    const peer = { public_key: created.peer.publicKey, ip: created.peer.ip };

    expect(before.latestHandshake).to.be.above(0);
    expect(valueOf(samples, 'wg_peerd_peer_last_handshake_timestamp_seconds', peer)).to.be.within(
      before.latestHandshake,
      after.latestHandshake,
    );
    expect(valueOf(samples, 'wg_peerd_peer_status', { ...peer, status: 'alive' })).to.equal(1);
    const rx = valueOf(samples, 'wg_peerd_peer_receive_bytes_total', peer);
    const tx = valueOf(samples, 'wg_peerd_peer_transmit_bytes_total', peer);
    console.log(
      `      wg show rx ${before.rxBytes}..${after.rxBytes} tx ${before.txBytes}..${after.txBytes}; /metrics rx ${rx} tx ${tx}`,
    );
    expect(rx).to.be.within(before.rxBytes, after.rxBytes);
    expect(tx).to.be.within(before.txBytes, after.txBytes);
    // The download went out through the tunnel, so more was sent than the cap let through.
    expect(tx).to.be.above(CAP / 2);

    // One series per direction the limit holds in (the interface's egress and the IFB).
    for (const direction of ['download', 'upload']) {
      expect(
        valueOf(samples, 'wg_peerd_peer_speed_limit_bytes_per_second', { ...peer, direction }),
      ).to.equal(LIMIT);
    }
    expect(valueOf(samples, 'wg_peerd_peer_data_cap_bytes', peer)).to.equal(CAP);
    expect(valueOf(samples, 'wg_peerd_peer_data_cap_used_bytes', peer)).to.equal(nftQuota().used);
    expect(valueOf(samples, 'wg_peerd_peer_data_cap_exhausted', peer)).to.equal(1);

    expect(valueOf(samples, 'wg_peerd_peers', { status: 'alive' })).to.equal(1);
    expect(valueOf(samples, 'wg_peerd_peers_speed_limited')).to.equal(1);
    expect(valueOf(samples, 'wg_peerd_peers_data_capped')).to.equal(1);
    expect(valueOf(samples, 'wg_peerd_peers_data_cap_exhausted')).to.equal(1);
  });

  it('passes promtool check metrics', async () => {
    const { text } = await scrape(daemon!, TOKEN);
    const result = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
    expect(result.error, 'promtool (Debian package prometheus) must be installed').to.equal(
      undefined,
    );
    expect(result.status, `${result.stdout}${result.stderr}`).to.equal(0);
  });

  it('answers a scrape and a list at the same time from one kernel read', async () => {
    const first = reads(parseSamples((await scrape(daemon!, TOKEN)).text)); // counts its own read
    const [metrics, list] = await Promise.all([
      scrape(daemon!, TOKEN),
      call(daemon!, 'GET', '/api/peers', { token: TOKEN }),
    ]);
    const last = reads(parseSamples((await scrape(daemon!, TOKEN)).text)); // and this one its own
    console.log(`      kernel reads: ${first} after the first scrape, ${last} after the last`);
    expect(last - first, 'reads of the concurrent pair plus the last scrape').to.equal(2);
    // One read: both answers show the same counters.
    expect(list.status, list.text).to.equal(200);
    const listed = list
      .json<{ peers: Array<{ public_key: string; tx_bytes: number }> }>()
      .peers.find((p) => p.public_key === created.peer.publicKey);
    const peer = { public_key: created.peer.publicKey, ip: created.peer.ip };
    expect(
      valueOf(parseSamples(metrics.text), 'wg_peerd_peer_transmit_bytes_total', peer),
    ).to.equal(listed?.tx_bytes);
  });

  it('refuses /metrics without the token', async () => {
    const response = await call(daemon!, 'GET', '/metrics'); // no token
    expect(response.status).to.equal(401);
  });
});
