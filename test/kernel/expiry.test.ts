/**
 * Peer expiry against a real kernel (issue 31, Done when 2): a real WireGuard client in the
 * wgcli namespace made from the create response, numbered UDP datagrams through the tunnel in
 * both directions (support/udp-two-way.ts), and `nft` as the oracle of the kernel's sets. The
 * peer gets an expiry 5 s ahead, the daemon is then frozen with SIGSTOP, and the tunnel must
 * stop passing the peer's datagrams within 1 s of `expiresAt`, both ways, with no process of
 * wg-peerd running: the kernel's element in the `valid` set ends by itself. Continued
 * (SIGCONT), the daemon lists the peer expired; a renewal (PATCH .../expiry) lets the datagrams
 * through again at once, both ways. A create with `expiresAt` and a clear are checked in the
 * kernel's sets too.
 */
import { expect } from 'chai';
import * as fs from 'node:fs';
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
  removeDaemonLeftovers,
  setupClientNamespace,
  sh,
  teardownClientNamespace,
  trySh,
} from './support/topology';
import { TwoWayUdp } from './support/udp-two-way';

const IFNAME = 'wgxp0';
const CLIENT_IF = 'wgxpc';
const SERVER_IP = '10.85.0.1';
const STATE_DIR = '/tmp/wg-peerd-expiry-test';
const LISTEN = '127.0.0.1:18185';
const UDP_PORT = 5_311;
const TABLE = `wg_peerd_expiry_${IFNAME}`;
const ARGS = [
  ...['--interface', IFNAME, '--address', `${SERVER_IP}/24`, '--listen-port', '51885'],
  ...['--listen', LISTEN, '--endpoint-host', SERVER_UNDERLAY_IP, '--list-max-age', '0'],
  ...['--state-dir', STATE_DIR],
];

interface Listed {
  public_key: string;
  expires_at: string | null;
  expired: boolean;
}

/** The elements of one set of the ip expiry table as nft prints them. */
function kernelSet(set: 'expiring' | 'valid'): Array<Record<string, unknown>> {
  if (!trySh(`nft list table ip ${TABLE} >/dev/null 2>&1`)) return [];
  const { nftables } = JSON.parse(sh(`nft -j list set ip ${TABLE} ${set}`)) as {
    nftables: Array<{ set?: { elem?: Array<{ elem: Record<string, unknown> } | string> } }>;
  };
  return (nftables.find((e) => e.set)?.set?.elem ?? []).map((e) =>
    typeof e === 'string' ? { val: e } : e.elem,
  );
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

describe('peer expiry enforced by the kernel while the daemon is stopped (real kernel, issue 31)', function () {
  this.timeout(240_000);
  let daemon: DaemonProcess | undefined;
  let created: CreatedPeer;
  let flow: TwoWayUdp | undefined;
  let stopped = false;

  const peerPath = (what: string): string =>
    `/api/peer/${encodeURIComponent(created.peer.publicKey)}${what}`;
  const listed = async (): Promise<Listed> => {
    const peers = (await api(daemon!, 'GET', '/api/peers')).body.peers as Listed[];
    const entry = peers.find((p) => p.public_key === created.peer.publicKey);
    if (!entry) throw new Error('the peer is not listed');
    return entry;
  };

  function cleanUp(): void {
    removeDaemonLeftovers(IFNAME);
    fs.rmSync(STATE_DIR, { recursive: true, force: true });
  }

  before(async function () {
    assertInTestVm();
    cleanUp();
    setupClientNamespace();
    daemon = await startDaemon({ args: ARGS, listen: LISTEN, prefix: ['env'] });
  });

  after(async function () {
    flow?.stop();
    if (stopped) daemon?.signal('SIGCONT');
    await daemon?.stop();
    teardownClientNamespace();
    cleanUp();
  });

  it('takes expiresAt at create and keeps it in the kernel sets; refuses a past or malformed one with details', async () => {
    const expiresAt = new Date(Date.now() + 3_600_000).toISOString();
    const reply = await api(daemon!, 'POST', '/api/peer', { expiresAt });
    expect(reply.status, JSON.stringify(reply.body)).to.equal(201);
    created = reply.body as unknown as CreatedPeer;
    expect(await listed()).to.include({ expires_at: expiresAt, expired: false });
    expect(kernelSet('expiring').map((e) => [e['val'], e['comment']])).to.deep.equal([
      [created.peer.ip, `expires ${expiresAt}`],
    ]);
    expect(kernelSet('valid').map((e) => e['val'])).to.deep.equal([created.peer.ip]);
    const past = await api(daemon!, 'PATCH', peerPath('/expiry'), {
      expiresAt: '2020-01-01T00:00:00Z',
    });
    expect(past.status).to.equal(400);
    expect(past.body.details).to.deep.equal([
      { field: '/expiresAt', message: 'must be in the future' },
    ]);
    const noOffset = await api(daemon!, 'PATCH', peerPath('/expiry'), {
      expiresAt: '2030-01-01T00:00:00',
    });
    expect(noOffset.status).to.equal(400);
    expect(noOffset.body.details).to.have.length.above(0);
  });

  it('stops the peer both ways within 1 s of expiresAt while the daemon is frozen (SIGSTOP), lists it expired once continued, and lets it through at once after a renewal', async () => {
    configureClient(created, CLIENT_IF, `${SERVER_IP}/32`);
    flow = new TwoWayUdp({
      netns: CLIENT_NS,
      serverAddress: SERVER_IP,
      clientAddress: created.peer.ip,
      port: UDP_PORT,
      intervalMs: 20,
    });
    await flow.start();
    const started = Date.now();
    await flow.arrivalAfter('fromPeer', started, 30_000);
    await flow.arrivalAfter('toPeer', started, 30_000);
    // The tunnel is up: the expiry 5 s ahead, then the daemon frozen before it comes.
    const expiresAtMs = Date.now() + 5_000;
    const expiresAt = new Date(expiresAtMs).toISOString();
    const set = await api(daemon!, 'PATCH', peerPath('/expiry'), { expiresAt });
    expect(set.status, JSON.stringify(set.body)).to.equal(200);
    daemon!.signal('SIGSTOP');
    stopped = true;
    const frozenAt = Date.now();
    expect(frozenAt, 'the daemon frozen before the expiry').to.be.below(expiresAtMs);
    const [fromCut, toCut] = await Promise.all([
      flow.cut('fromPeer', 1_500, 30_000),
      flow.cut('toPeer', 1_500, 30_000),
    ]);
    console.log(
      `      frozen ${expiresAtMs - frozenAt} ms before expiresAt; cut from the peer ${fromCut - expiresAtMs} ms, to the peer ${toCut - expiresAtMs} ms after it`,
    );
    for (const cut of [fromCut, toCut]) {
      expect(cut - expiresAtMs, 'cut after expiresAt (ms)').to.be.within(-100, 1_000);
    }
    // Nothing passes while the daemon stays frozen.
    const quietFrom = flow.arrivals('fromPeer');
    const quietTo = flow.arrivals('toPeer');
    await sleep(1_000);
    expect([flow.arrivals('fromPeer'), flow.arrivals('toPeer')]).to.deep.equal([
      quietFrom,
      quietTo,
    ]);
    expect(kernelSet('valid')).to.deep.equal([]);
    expect(kernelSet('expiring').map((e) => e['val'])).to.deep.equal([created.peer.ip]);

    daemon!.signal('SIGCONT');
    stopped = false;
    expect(await listed()).to.include({ expires_at: expiresAt, expired: true });
    const later = new Date(Date.now() + 3_600_000).toISOString();
    const renewed = await api(daemon!, 'PATCH', peerPath('/expiry'), { expiresAt: later });
    expect(renewed.status, JSON.stringify(renewed.body)).to.equal(200);
    const answeredAt = Date.now();
    const [fromBack, toBack] = await Promise.all([
      flow.arrivalAfter('fromPeer', answeredAt, 5_000),
      flow.arrivalAfter('toPeer', answeredAt, 5_000),
    ]);
    console.log(
      `      after the renewal's answer: from the peer ${fromBack - answeredAt} ms, to the peer ${toBack - answeredAt} ms`,
    );
    expect(fromBack - answeredAt).to.be.below(1_000);
    expect(toBack - answeredAt).to.be.below(1_000);
    expect(await listed()).to.include({ expires_at: later, expired: false });
    flow.stop();
    flow = undefined;
  });

  it('clears an expiry: both elements leave the kernel, the list shows null', async () => {
    const cleared = await api(daemon!, 'PATCH', peerPath('/expiry'), { expiresAt: null });
    expect(cleared.status).to.equal(200);
    expect(await listed()).to.include({ expires_at: null, expired: false });
    expect(kernelSet('expiring')).to.deep.equal([]);
    expect(kernelSet('valid')).to.deep.equal([]);
  });
});
