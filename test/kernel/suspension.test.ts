/**
 * Suspension end to end (issue 19, "Done when" 1d): the daemon (`npm start`) with a state dir, a
 * real WireGuard client in the wgcli namespace made from the create response, a TCP upload
 * running through the tunnel, and `nft`, `wg` and a counter table of the test's own as the
 * oracles. Suspend must stop the live transfer within 1 s of the answer, in both directions
 * (the oracle's counters, on the same hooks after the daemon's chains, see no packet of the
 * peer); resume must let it go on; key, address, counters, limit and cap are kept; the
 * suspension survives a daemon restart (kept in the kernel) and the loss of the interface and
 * every table, as in a reboot (restored from the state dir before the peer is back). A cap
 * reset (NFT_MSG_GETOBJ_RESET) answers the closing usage nft showed and lets a cut-off upload on.
 * On a dual-stack interface (issue 18) a suspended peer passes no IPv6 packet either: an IPv6
 * upload and IPv6 pings both ways stop and go on after resume, and the /128's suspension is put
 * back after a reboot like the IPv4 one.
 */
import { expect } from 'chai';
import { type ChildProcess, spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as net from 'node:net';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { connectClient, saveClientConfig } from '../kernel-reboot/support/clients';
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
  deleteLink,
  deleteNftTable,
  removeDaemonLeftovers,
  setupClientNamespace,
  sh,
  teardownClientNamespace,
  trySh,
  wgShowDump,
} from './support/topology';

const IFNAME = 'wgsu0';
const CLIENT_IF = 'wgsuc';
const SERVER_IP = '10.84.0.1';
const STATE_DIR = '/tmp/wg-peerd-suspension-test';
const LISTEN = '127.0.0.1:18164';
const TCP_PORT = 5211;
const SUSPENSION_TABLE = `wg_peerd_suspend_${IFNAME}`;
const ORACLE_TABLE = 'wgsu_oracle';
const ARGS = [
  '--interface',
  IFNAME,
  '--address',
  `${SERVER_IP}/24`,
  '--listen-port',
  '51864',
  '--listen',
  LISTEN,
  '--endpoint-host',
  SERVER_UNDERLAY_IP,
  '--list-max-age',
  '0',
  '--state-dir',
  STATE_DIR,
];

/** Writes to the server as fast as the tunnel takes it, until killed. */
const UPLOAD_SCRIPT = `
const net = require('net');
const [host, port] = process.argv.slice(1);
const chunk = Buffer.alloc(16384, 0x55);
const socket = net.connect(Number(port), host, () => {
  const pump = () => { while (socket.write(chunk)); };
  socket.on('drain', pump);
  pump();
});
socket.on('error', () => process.exit(0));
`;

interface Listed {
  public_key: string;
  ip_address: string;
  allowed_ips: string[];
  rx_bytes: number;
  tx_bytes: number;
  speed_limit_bytes_per_second: number | null;
  data_cap: { quota_bytes: number; used_bytes: number; enforced: boolean } | null;
  suspended: boolean;
}

/** The client's endless upload to the sink at `host`, run in the client namespace. */
function startUpload(host = SERVER_IP): ChildProcess {
  return spawn('ip', [
    'netns',
    'exec',
    CLIENT_NS,
    process.execPath,
    '-e',
    UPLOAD_SCRIPT,
    host,
    String(TCP_PORT),
  ]);
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Counters of the test's own on the daemon's hooks, at priority filter (after the daemon's
 * suspension chains at filter - 10, with the data caps' chains): packets from the peer through
 * the tunnel, and to it. Made fresh (at 0) by each call.
 */
function startOracle(
  peerIp: string,
  family: 'ip' | 'ip6' = 'ip',
  ifname = IFNAME,
): { from(): number; to(): number } {
  deleteNftTable(family, ORACLE_TABLE);
  sh(`nft add table ${family} ${ORACLE_TABLE}`);
  sh(
    `nft add chain ${family} ${ORACLE_TABLE} pre '{ type filter hook prerouting priority filter; policy accept; }'`,
  );
  sh(
    `nft add chain ${family} ${ORACLE_TABLE} post '{ type filter hook postrouting priority filter; policy accept; }'`,
  );
  sh(
    `nft add rule ${family} ${ORACLE_TABLE} pre iifname ${ifname} ${family} saddr ${peerIp} counter`,
  );
  sh(
    `nft add rule ${family} ${ORACLE_TABLE} post oifname ${ifname} ${family} daddr ${peerIp} counter`,
  );
  const packets = (chain: string): number => {
    const { nftables } = JSON.parse(sh(`nft -j list chain ${family} ${ORACLE_TABLE} ${chain}`)) as {
      nftables: Array<{ rule?: { expr?: Array<{ counter?: { packets: number } }> } }>;
    };
    let total = 0;
    for (const entry of nftables) {
      for (const expr of entry.rule?.expr ?? []) total += expr.counter?.packets ?? 0;
    }
    return total;
  };
  return { from: () => packets('pre'), to: () => packets('post') };
}

/** The addresses nft lists in the daemon's suspended set, with their comments. */
function nftSuspended(
  family: 'ip' | 'ip6' = 'ip',
  table = SUSPENSION_TABLE,
): Array<{ address: string; comment: string | undefined }> {
  if (!trySh(`nft list table ${family} ${table} >/dev/null 2>&1`)) return [];
  const { nftables } = JSON.parse(sh(`nft -j list set ${family} ${table} suspended`)) as {
    nftables: Array<{ set?: { elem?: unknown[] } }>;
  };
  const elements = nftables.find((e) => e.set)?.set?.elem ?? [];
  return elements.map((entry) => {
    if (typeof entry === 'string') return { address: entry, comment: undefined };
    const elem = (entry as { elem: { val: string; comment?: string } }).elem;
    return { address: elem.val, comment: elem.comment };
  });
}

/** Whether one ping through the tunnel gets an answer within `seconds`. */
function pings(from: string | undefined, address: string, seconds = 2): boolean {
  const prefix = from === undefined ? '' : `ip netns exec ${from} `;
  return trySh(`${prefix}busybox ping -c 1 -w ${seconds} -q ${address}`);
}

/**
 * After the interface was recreated: the client's pings (to `target`) make it shake hands with
 * the new interface (same keys), so the tunnel is up again, and still none of them passes.
 */
function shakesHandsWithoutPassing(
  ifname: string,
  publicKey: string,
  since: number,
  target: string,
): void {
  const handshake = (): number =>
    wgShowDump(ifname).peers.find((p) => p.publicKey === publicKey)?.latestHandshake ?? 0;
  for (let i = 0; i < 20 && handshake() < since; i++) {
    expect(pings(CLIENT_NS, target)).to.equal(false);
  }
  expect(handshake(), 'a handshake with the recreated interface').to.be.at.least(since);
  expect(pings(CLIENT_NS, target)).to.equal(false);
}

class UploadSink {
  private readonly server: net.Server;
  received = 0;
  lastAt = 0;
  private readonly sockets = new Set<net.Socket>();

  constructor() {
    this.server = net.createServer((socket) => {
      this.sockets.add(socket);
      socket.on('data', (chunk: Buffer) => {
        this.received += chunk.length;
        this.lastAt = Date.now();
      });
      socket.on('error', () => undefined);
      socket.on('close', () => this.sockets.delete(socket));
    });
  }

  listen(host = SERVER_IP): Promise<void> {
    return new Promise((resolve) => this.server.listen(TCP_PORT, host, resolve));
  }

  /** Resolves once `bytes` more than now have arrived, or rejects after `ms`. */
  async grows(bytes: number, ms: number): Promise<void> {
    const start = this.received;
    const deadline = Date.now() + ms;
    while (this.received - start < bytes) {
      if (Date.now() > deadline) {
        throw new Error(`only ${this.received - start} bytes arrived within ${ms} ms`);
      }
      await sleep(50);
    }
  }

  close(): void {
    for (const socket of this.sockets) socket.destroy();
    this.server.close();
  }
}

describe('suspension and cap reset of a peer (real kernel, a live transfer through a WireGuard tunnel)', function () {
  this.timeout(240_000);
  let daemon: DaemonProcess | undefined;
  let created: CreatedPeer;
  let sink: UploadSink;
  let upload: ChildProcess | undefined;

  const start = async (): Promise<void> => {
    daemon = await startDaemon({ args: ARGS, listen: LISTEN, prefix: ['env'] });
  };
  const stop = async (): Promise<void> => {
    expect(await daemon!.stop()).to.equal(0);
    daemon = undefined;
  };
  const peerPath = (what: string): string =>
    `/api/peer/${encodeURIComponent(created.peer.publicKey)}${what}`;
  const listed = async (): Promise<Listed> => {
    const peers = (await api(daemon!, 'GET', '/api/peers')).body.peers as Listed[];
    const entry = peers.find((p) => p.public_key === created.peer.publicKey);
    if (!entry) throw new Error('the peer is not listed');
    return entry;
  };
  const suspend = async (suspended: boolean): Promise<number> => {
    const reply = await api(daemon!, 'PATCH', peerPath('/suspension'), { suspended });
    expect(reply.status, JSON.stringify(reply.body)).to.equal(200);
    return Date.now();
  };

  function cleanUp(): void {
    removeDaemonLeftovers(IFNAME);
    deleteNftTable('ip', ORACLE_TABLE);
    fs.rmSync(STATE_DIR, { recursive: true, force: true });
  }

  before(async function () {
    assertInTestVm();
    cleanUp();
    setupClientNamespace();
    await start();
    const reply = await api(daemon!, 'POST', '/api/peer');
    expect(reply.status).to.equal(201);
    created = reply.body as unknown as CreatedPeer;
    configureClient(created, CLIENT_IF, `${SERVER_IP}/32`);
    expect(pings(CLIENT_NS, SERVER_IP, 10), 'the tunnel works before any suspension').to.equal(
      true,
    );
    sink = new UploadSink();
    await sink.listen();
  });

  afterEach(function () {
    if (this.currentTest?.state === 'failed') {
      console.log(daemon?.output().split('\n').slice(-30).join('\n'));
    }
  });

  after(async function () {
    upload?.kill('SIGKILL');
    sink?.close();
    await daemon?.stop();
    teardownClientNamespace();
    deleteLink(CLIENT_IF, CLIENT_NS);
    cleanUp();
  });

  it('answers 400 with details for a suspended that is not a boolean and 404 for an unknown peer, changing nothing', async () => {
    const bad = await api(daemon!, 'PATCH', peerPath('/suspension'), { suspended: 'yes' });
    expect(bad.status).to.equal(400);
    expect(bad.body).to.include({ success: false, code: 'VALIDATION_FAILED' });
    expect(bad.body.details).to.deep.equal([{ field: '/suspended', message: 'must be boolean' }]);
    const unknown = Buffer.alloc(32, 7).toString('base64');
    const missing = await api(
      daemon!,
      'PATCH',
      `/api/peer/${encodeURIComponent(unknown)}/suspension`,
      { suspended: true },
    );
    expect(missing.status).to.equal(404);
    expect(missing.body.error).to.equal('Peer not found in VPN');
    expect(nftSuspended()).to.deep.equal([]);
    expect((await listed()).suspended).to.equal(false);
  });

  it('stops a live upload within 1 s of the answer, both directions, and keeps key, address, counters, limit and cap', async () => {
    const limit = await api(daemon!, 'PATCH', peerPath('/speed-limit'), {
      bytesPerSecond: 10_000_000,
    });
    expect(limit.status).to.equal(200);
    const cap = await api(daemon!, 'PATCH', peerPath('/data-cap'), { quotaBytes: 1e12 });
    expect(cap.status).to.equal(200);
    upload = startUpload();
    await sink.grows(200_000, 30_000);
    const before = await listed();

    const answeredAt = await suspend(true);
    await sleep(1000);
    const atOneSecond = sink.received;
    expect(sink.lastAt - answeredAt, 'last byte after the answer (ms)').to.be.below(1000);
    const oracle = startOracle(created.peer.ip);
    await sleep(2000);
    expect(sink.received, 'bytes arriving more than 1 s after the answer').to.equal(atOneSecond);
    // Both directions, the client asking and the server asking: nothing reaches the hooks
    // behind the daemon's chains.
    expect(pings(CLIENT_NS, SERVER_IP)).to.equal(false);
    expect(pings(undefined, created.peer.ip)).to.equal(false);
    expect(oracle.from(), 'packets from the suspended peer past the drop').to.equal(0);
    expect(oracle.to(), 'packets to the suspended peer past the drop').to.equal(0);

    const during = await listed();
    expect(during.suspended).to.equal(true);
    expect(nftSuspended()).to.deep.equal([
      { address: created.peer.ip, comment: `wg-peerd peer ${created.peer.publicKey}` },
    ]);
    // WireGuard keeps the peer as it was: same allowed IPs, counters not reset.
    expect(during.allowed_ips).to.deep.equal(before.allowed_ips);
    expect(during.rx_bytes).to.be.at.least(before.rx_bytes);
    expect(during.tx_bytes).to.be.at.least(before.tx_bytes);
    expect(during.speed_limit_bytes_per_second).to.equal(10_000_000);
    // Dropped before the quota counts: the cap's usage did not move while suspended.
    const usedAtSuspend = during.data_cap!.used_bytes;
    expect(during.data_cap).to.include({ quota_bytes: 1e12, enforced: true });
    expect(wgShowDump(IFNAME).peers.map((p) => p.publicKey)).to.include(created.peer.publicKey);

    await sleep(1000);
    expect((await listed()).data_cap!.used_bytes).to.equal(usedAtSuspend);
    await suspend(false);
    await sink.grows(200_000, 20_000); // the same TCP connection goes on
    const after = await listed();
    expect(after.suspended).to.equal(false);
    expect(nftSuspended()).to.deep.equal([]);
    expect(after.rx_bytes).to.be.at.least(during.rx_bytes);
    expect(after.data_cap!.used_bytes).to.be.above(usedAtSuspend);
    expect(after.speed_limit_bytes_per_second).to.equal(10_000_000);
    upload.kill('SIGKILL');
    upload = undefined;
  });

  it('stays suspended across a daemon restart: the kernel keeps it, the list reads it back', async () => {
    await suspend(true);
    await stop();
    expect(pings(CLIENT_NS, SERVER_IP)).to.equal(false); // no daemon: the kernel enforces it
    await start();
    expect((await listed()).suspended).to.equal(true);
    expect(pings(CLIENT_NS, SERVER_IP)).to.equal(false);
  });

  it('is put back from the state dir when the interface and every table are gone, as after a reboot', async () => {
    await stop();
    removeDaemonLeftovers(IFNAME); // what a reboot loses: the interface, its IFB, the tables
    expect(nftSuspended()).to.deep.equal([]);
    const restartedAt = Math.floor(Date.now() / 1000) - 1;
    await start();
    const entry = await listed();
    expect(entry).to.include({ ip_address: created.peer.ip, suspended: true });
    expect(nftSuspended().map((e) => e.address)).to.deep.equal([created.peer.ip]);
    shakesHandsWithoutPassing(IFNAME, created.peer.publicKey, restartedAt, SERVER_IP);
    await suspend(false);
    expect(pings(CLIENT_NS, SERVER_IP, 10)).to.equal(true);
  });

  it('resets a used-up cap in one step: answers the closing usage nft showed, and the stalled upload goes on', async () => {
    const used = (await listed()).data_cap!.used_bytes;
    const quotaBytes = used + 300_000;
    expect((await api(daemon!, 'PATCH', peerPath('/data-cap'), { quotaBytes })).status).to.equal(
      200,
    );
    upload = startUpload();
    // The upload under way first: its process may take over 2 s to start in a loaded VM, which
    // the wait below would take for the cut (6.12, nft then showed 216,440 bytes still free).
    await sink.grows(50_000, 30_000);
    // Until the cap cuts the upload off: nothing more arrives for 2 s.
    for (let last = -1; sink.received !== last;) {
      last = sink.received;
      await sleep(2000);
    }
    const quotaName = `q_${created.peer.ip.replace(/\./g, '_')}`;
    const nftUsed = (): { bytes: number; used: number } => {
      const { nftables } = JSON.parse(
        sh(`nft -j list quota ip wg_peerd_${IFNAME} ${quotaName}`),
      ) as { nftables: Array<{ quota?: { bytes: number; used: number } }> };
      const { bytes, used } = nftables.find((e) => e.quota)!.quota!;
      return { bytes, used };
    };
    expect(nftUsed()).to.deep.equal({ bytes: quotaBytes, used: quotaBytes });

    const reset = await api(daemon!, 'POST', peerPath('/data-cap/reset'));
    expect(reset.status, JSON.stringify(reset.body)).to.equal(200);
    expect(reset.body).to.include({ success: true, usedBytes: quotaBytes });
    expect(nftUsed().used).to.be.below(quotaBytes); // from zero, whatever passed since
    await sink.grows(100_000, 30_000);
    upload.kill('SIGKILL');
    upload = undefined;
    const after = (await listed()).data_cap!;
    expect(after.quota_bytes).to.equal(quotaBytes);
    expect(after.used_bytes).to.be.at.least(100_000).and.at.most(quotaBytes);
  });

  it('answers 409 PEER_HAS_NO_DATA_CAP to a reset of a peer without a cap, and 404 for an unknown peer', async () => {
    expect((await api(daemon!, 'DELETE', peerPath('/data-cap'))).status).to.equal(200);
    const reset = await api(daemon!, 'POST', peerPath('/data-cap/reset'));
    expect(reset.status).to.equal(409);
    expect(reset.body.code).to.equal('PEER_HAS_NO_DATA_CAP');
    const unknown = encodeURIComponent(Buffer.alloc(32, 7).toString('base64'));
    expect((await api(daemon!, 'POST', `/api/peer/${unknown}/data-cap/reset`)).status).to.equal(
      404,
    );
  });

  it('deleting the peer removes its suspension from the kernel', async () => {
    await suspend(true);
    expect(nftSuspended()).to.have.length(1);
    const reply = await api(daemon!, 'DELETE', peerPath(''));
    expect(reply.status).to.equal(200);
    expect(nftSuspended()).to.deep.equal([]);
  });
});

const IFNAME6 = 'wgsu6';
const SERVER_IP6 = 'fd85::1';
const STATE_DIR6 = '/tmp/wg-peerd-suspension6-test';
const LISTEN6 = '127.0.0.1:18165';
const SUSPENSION_TABLE6 = `wg_peerd_suspend_${IFNAME6}`;
const ARGS6 = [
  '--interface',
  IFNAME6,
  '--address',
  '10.85.0.1/24',
  '--address6',
  `${SERVER_IP6}/64`,
  '--listen-port',
  '51865',
  '--listen',
  LISTEN6,
  '--endpoint-host',
  SERVER_UNDERLAY_IP,
  '--list-max-age',
  '0',
  '--state-dir',
  STATE_DIR6,
];

describe('suspension of a dual-stack peer (real kernel, IPv6 through a WireGuard tunnel, issue 18)', function () {
  this.timeout(240_000);
  let daemon: DaemonProcess | undefined;
  let created: CreatedPeer & { peer: { ipv6: string }; config: string };
  let sink: UploadSink;
  let upload: ChildProcess | undefined;

  const start = async (): Promise<void> => {
    daemon = await startDaemon({ args: ARGS6, listen: LISTEN6, prefix: ['env'] });
  };
  const peerPath = (what: string): string =>
    `/api/peer/${encodeURIComponent(created.peer.publicKey)}${what}`;
  const suspend = async (suspended: boolean): Promise<number> => {
    const reply = await api(daemon!, 'PATCH', peerPath('/suspension'), { suspended });
    expect(reply.status, JSON.stringify(reply.body)).to.equal(200);
    return Date.now();
  };
  const suspendedNow = (): { ip: string[]; ip6: string[] } => ({
    ip: nftSuspended('ip', SUSPENSION_TABLE6).map((e) => e.address),
    ip6: nftSuspended('ip6', SUSPENSION_TABLE6).map((e) => e.address),
  });

  function cleanUp(): void {
    removeDaemonLeftovers(IFNAME6);
    deleteNftTable('ip6', ORACLE_TABLE);
    fs.rmSync(STATE_DIR6, { recursive: true, force: true });
  }

  before(async function () {
    assertInTestVm();
    cleanUp();
    setupClientNamespace();
    await start();
    const reply = await api(daemon!, 'POST', '/api/peer');
    expect(reply.status).to.equal(201);
    created = reply.body as unknown as typeof created;
    expect(created.peer.ipv6).to.equal('fd85::2');
    // The client as its operator would bring it up: wg-quick, from the create response alone.
    const dir = fs.mkdtempSync(path.join(tmpdir(), 'wgsu6-'));
    connectClient(CLIENT_NS, saveClientConfig(dir, 'wgsu6c', created.config));
    expect(
      pings(CLIENT_NS, SERVER_IP6, 20),
      'IPv6 through the tunnel before any suspension',
    ).to.equal(true);
    sink = new UploadSink();
    await sink.listen(SERVER_IP6);
  });

  afterEach(function () {
    if (this.currentTest?.state === 'failed') {
      console.log(daemon?.output().split('\n').slice(-30).join('\n'));
    }
  });

  after(async function () {
    upload?.kill('SIGKILL');
    sink?.close();
    await daemon?.stop();
    teardownClientNamespace();
    cleanUp();
  });

  it('stops a live IPv6 upload within 1 s of the answer and IPv6 pings both ways, IPv4 with them, and lets them through again on resume', async () => {
    upload = startUpload(SERVER_IP6);
    await sink.grows(200_000, 30_000);

    const answeredAt = await suspend(true);
    await sleep(1000);
    const atOneSecond = sink.received;
    expect(sink.lastAt - answeredAt, 'last byte after the answer (ms)').to.be.below(1000);
    const oracle = startOracle(created.peer.ipv6, 'ip6', IFNAME6);
    await sleep(2000);
    expect(sink.received, 'IPv6 bytes arriving more than 1 s after the answer').to.equal(
      atOneSecond,
    );
    expect(pings(CLIENT_NS, SERVER_IP6)).to.equal(false);
    expect(pings(undefined, created.peer.ipv6)).to.equal(false);
    expect(pings(CLIENT_NS, '10.85.0.1')).to.equal(false);
    expect(oracle.from(), 'IPv6 packets from the suspended peer past the drop').to.equal(0);
    expect(oracle.to(), 'IPv6 packets to the suspended peer past the drop').to.equal(0);
    const owner = `wg-peerd peer ${created.peer.publicKey}`;
    expect(nftSuspended('ip6', SUSPENSION_TABLE6)).to.deep.equal([
      { address: created.peer.ipv6, comment: owner },
    ]);
    expect(nftSuspended('ip', SUSPENSION_TABLE6)).to.deep.equal([
      { address: created.peer.ip, comment: owner },
    ]);
    const listed = (await api(daemon!, 'GET', '/api/peers')).body.peers as Array<
      Listed & { ipv6_address: string | null }
    >;
    expect(listed.map((p) => [p.ipv6_address, p.suspended])).to.deep.equal([
      [created.peer.ipv6, true],
    ]);

    await suspend(false);
    await sink.grows(200_000, 20_000); // the same TCP connection over IPv6 goes on
    expect(pings(CLIENT_NS, SERVER_IP6, 10)).to.equal(true);
    expect(pings(undefined, created.peer.ipv6, 10)).to.equal(true);
    expect(suspendedNow()).to.deep.equal({ ip: [], ip6: [] });
    upload.kill('SIGKILL');
    upload = undefined;
    deleteNftTable('ip6', ORACLE_TABLE);
  });

  it('is put back on IPv6 too from the state dir when the interface and every table are gone, as after a reboot', async () => {
    await suspend(true);
    expect(await daemon!.stop()).to.equal(0);
    daemon = undefined;
    removeDaemonLeftovers(IFNAME6); // what a reboot loses: the interface, its IFB, the tables
    expect(suspendedNow()).to.deep.equal({ ip: [], ip6: [] });
    const restartedAt = Math.floor(Date.now() / 1000) - 1;
    await start();
    expect(suspendedNow()).to.deep.equal({ ip: [created.peer.ip], ip6: [created.peer.ipv6] });
    shakesHandsWithoutPassing(IFNAME6, created.peer.publicKey, restartedAt, SERVER_IP6);
    await suspend(false);
    expect(pings(CLIENT_NS, SERVER_IP6, 10)).to.equal(true);
  });

  it('deleting the dual-stack peer removes both of its suspensions from the kernel', async () => {
    await suspend(true);
    expect(suspendedNow()).to.deep.equal({ ip: [created.peer.ip], ip6: [created.peer.ipv6] });
    expect((await api(daemon!, 'DELETE', peerPath(''))).status).to.equal(200);
    expect(suspendedNow()).to.deep.equal({ ip: [], ip6: [] });
  });
});
