import { expect } from 'chai';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { WgDump } from '../support/wg-dump';
import {
  type CreatedPeer,
  type DaemonProcess,
  api,
  configureClient,
  startDaemon,
} from './support/daemon';
import {
  CLIENT_NS,
  SERVER_UNDERLAY_IP,
  assertInTestVm,
  linkExists,
  ping,
  removeDaemonLeftovers,
  setupClientNamespace,
  sh,
  teardownClientNamespace,
  wgShowDump,
} from './support/topology';

const IFNAME = 'wge0';
const LISTEN = '127.0.0.1:18080';
const CLIENT_IF = 'wgc0';
const DAEMON_ARGS = [
  '--interface',
  IFNAME,
  '--listen',
  LISTEN,
  '--endpoint-host',
  SERVER_UNDERLAY_IP,
];

interface ListedPeer {
  public_key: string;
  ip_address: string;
  last_handshake: string | null;
  minutes_since_handshake: number | null;
  status: string;
}

function kernelPeers(): WgDump['peers'] {
  return wgShowDump(IFNAME).peers;
}

// The whole product against a real kernel: `npm start`, HTTP, a real client through the tunnel,
// with wg/tc/nft as the oracles of what the kernel holds.
describe('HTTP API end to end (real kernel, npm start)', function () {
  let daemon: DaemonProcess | undefined;
  let created: CreatedPeer;

  before(function () {
    assertInTestVm();
    setupClientNamespace();
    removeDaemonLeftovers(IFNAME);
  });

  after(async function () {
    await daemon?.stop();
    removeDaemonLeftovers(IFNAME);
    teardownClientNamespace();
  });

  it('creates the missing interface at start and serves', async () => {
    expect(linkExists(IFNAME)).to.equal(false);
    daemon = await startDaemon({ args: DAEMON_ARGS, listen: LISTEN });
    const dump = wgShowDump(IFNAME);
    expect(dump.device.listenPort).to.equal(51820);
    expect(sh(`ip -4 -o addr show dev ${IFNAME}`)).to.contain('10.8.0.1/24');
    expect(daemon.output()).to.match(/creat/i);
  });

  it('creates a peer whose response alone configures a client that pings through the tunnel', async () => {
    const response = await api(daemon!, 'POST', '/api/peer');
    expect(response.status).to.be.oneOf([200, 201]);
    expect(response.headers.get('cache-control')).to.contain('no-store');
    created = response.body as unknown as CreatedPeer;
    expect(created.success).to.equal(true);
    expect(created.peer.ip).to.equal('10.8.0.2');
    expect(created.server.endpoint).to.equal(`${SERVER_UNDERLAY_IP}:51820`);
    // The kernel holds the peer with exactly its /32.
    const inKernel = kernelPeers().find((p) => p.publicKey === created.peer.publicKey);
    expect(inKernel?.allowedIps).to.deep.equal([`${created.peer.ip}/32`]);

    configureClient(created, CLIENT_IF, '10.8.0.0/24');
    ping(CLIENT_NS, '10.8.0.1');
  });

  it('gives the server public key wg reports, and a private key that matches the public key', () => {
    expect(created.server.publicKey).to.equal(sh(`wg show ${IFNAME} public-key`).trim());
    expect(sh('wg pubkey', { input: `${created.peer.privateKey}\n` }).trim()).to.equal(
      created.peer.publicKey,
    );
  });

  it('lists the peer as ALIVE with minutes_since_handshake 0 after the handshake', async () => {
    const response = await api(daemon!, 'GET', '/api/peers?status=ALIVE');
    expect(response.status).to.equal(200);
    expect(response.body.filter).to.equal('ALIVE');
    const peers = response.body.peers as ListedPeer[];
    expect(response.body.total_count).to.equal(peers.length);
    const peer = peers.find((p) => p.public_key === created.peer.publicKey);
    expect(peer).to.include({
      ip_address: created.peer.ip,
      status: 'ALIVE',
      minutes_since_handshake: 0,
    });
    const handshake = kernelPeers().find(
      (p) => p.publicKey === created.peer.publicKey,
    )?.latestHandshake;
    expect(Math.floor(Date.parse(String(peer?.last_handshake)) / 1000)).to.equal(handshake);
    const dead = await api(daemon!, 'GET', '/api/peers?status=DEAD');
    expect(
      (dead.body.peers as ListedPeer[]).some((p) => p.public_key === created.peer.publicKey),
    ).to.equal(false);
  });

  it('sets a speed limit and a data cap that tc and nft then hold, and shows them in the list', async () => {
    const key = encodeURIComponent(created.peer.publicKey);
    const limit = await api(daemon!, 'PATCH', `/api/peer/${key}/speed-limit`, {
      bytesPerSecond: 250_000,
    });
    expect(limit.status).to.equal(200);
    expect(limit.body.success).to.equal(true);
    const cap = await api(daemon!, 'PATCH', `/api/peer/${key}/data-cap`, { quotaBytes: 5_000_000 });
    expect(cap.status).to.equal(200);
    // 250,000 bytes/s is 2 Mbit/s in tc's units.
    expect(sh(`tc class show dev ${IFNAME}`)).to.match(/rate 2Mbit/);
    expect(sh('nft -j list ruleset')).to.contain('5000000');
    const list = await api(daemon!, 'GET', '/api/peers');
    const peer = (list.body.peers as Array<Record<string, unknown>>).find(
      (p) => p.public_key === created.peer.publicKey,
    );
    expect(peer?.speed_limit_bytes_per_second).to.equal(250_000);
    expect((peer?.data_cap as { quota_bytes: number }).quota_bytes).to.equal(5_000_000);
  });

  it('gives 100 concurrent creations 100 distinct addresses, all in the kernel', async () => {
    const responses = await Promise.all(
      Array.from({ length: 100 }, () => api(daemon!, 'POST', '/api/peer')),
    );
    expect(responses.map((r) => r.status).filter((s) => s !== 200 && s !== 201)).to.deep.equal([]);
    const ips = responses.map((r) => (r.body as unknown as CreatedPeer).peer.ip);
    expect(new Set(ips).size).to.equal(100);
    const kernelIps = new Set(kernelPeers().flatMap((p) => p.allowedIps));
    for (const ip of ips) expect(kernelIps.has(`${ip}/32`), ip).to.equal(true);
    expect(ips).to.not.include(created.peer.ip);
  });

  it('loses no peer, limit or cap across a restart', async () => {
    const before = (await api(daemon!, 'GET', '/api/peers')).body.peers as ListedPeer[];
    expect(await daemon!.stop()).to.equal(0);
    daemon = await startDaemon({ args: DAEMON_ARGS, listen: LISTEN });
    const after = (await api(daemon, 'GET', '/api/peers')).body.peers as Array<
      Record<string, unknown>
    >;
    expect(after.map((p) => p.public_key).sort()).to.deep.equal(
      before.map((p) => p.public_key).sort(),
    );
    expect(after.length).to.equal(kernelPeers().length);
    const peer = after.find((p) => p.public_key === created.peer.publicKey);
    expect(peer?.speed_limit_bytes_per_second).to.equal(250_000);
    expect((peer?.data_cap as { quota_bytes: number }).quota_bytes).to.equal(5_000_000);
  });

  it('deletes a peer with its limit and cap, and a second delete is 404', async () => {
    const key = encodeURIComponent(created.peer.publicKey);
    const first = await api(daemon!, 'DELETE', `/api/peer/${key}`);
    expect(first.status).to.equal(200);
    expect(first.body.success).to.equal(true);
    expect(kernelPeers().some((p) => p.publicKey === created.peer.publicKey)).to.equal(false);
    expect(sh(`tc class show dev ${IFNAME}`)).to.not.match(/rate 2Mbit/);
    expect(sh('nft -j list ruleset')).to.not.contain('5000000');
    const second = await api(daemon!, 'DELETE', `/api/peer/${key}`);
    expect(second.status).to.equal(404);
    expect(second.body).to.include({ success: false, error: 'Peer not found in VPN' });
  });

  it('answers the config endpoint with 404', async () => {
    const response = await api(
      daemon!,
      'GET',
      `/api/peer/${encodeURIComponent(created.peer.publicKey)}/config`,
    );
    expect(response.status).to.equal(404);
    expect(response.body.success).to.equal(false);
  });

  it('shuts down gracefully on SIGTERM with status 0', async () => {
    expect(await daemon!.stop()).to.equal(0);
    daemon = undefined;
  });
});

describe('start-up refusals (real kernel)', function () {
  before(function () {
    assertInTestVm();
  });

  it('exits 2 with one clear line when asked to listen on a non-loopback address without a token', function () {
    const output = sh(
      `npm start --silent -- --interface wgz0 --listen 0.0.0.0:18081 2>&1; echo "status=$?"`,
    );
    expect(output).to.match(/status=2\s*$/);
    expect(output).to.match(/token/i);
    expect(linkExists('wgz0')).to.equal(false);
  });

  it('with a token, answers requests without it with 401', async function () {
    const dir = mkdtempSync(path.join(tmpdir(), 'token-'));
    writeFileSync(path.join(dir, 'token'), 's3cret-token-0123456789\n', { mode: 0o600 });
    const daemon = await startDaemon({
      args: [
        '--interface',
        'wgz1',
        '--listen',
        '127.0.0.1:18082',
        '--token-file',
        path.join(dir, 'token'),
      ],
      listen: '127.0.0.1:18082',
      token: 's3cret-token-0123456789',
    });
    try {
      expect((await api(daemon, 'GET', '/api/peers')).status).to.equal(401);
      expect((await api(daemon, 'GET', '/api/peers', undefined, 'wrong')).status).to.equal(401);
      expect(
        (await api(daemon, 'GET', '/api/peers', undefined, 's3cret-token-0123456789')).status,
      ).to.equal(200);
    } finally {
      await daemon.stop();
      removeDaemonLeftovers('wgz1');
    }
  });
});
