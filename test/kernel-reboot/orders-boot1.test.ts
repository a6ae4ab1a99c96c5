/**
 * Issue 28, "Done when" 2, boot 1 of 2: every answered change survives a reboot, whatever the
 * order of events. Run by scripts/vm/test-reboot.sh in the same VM boot as boot1.test.ts;
 * orders-boot2.test.ts checks the next boot. Three scenarios, each on its own interface
 * (support/orders.ts), each daemon stopped with SIGTERM as systemd stops it at a reboot:
 *
 * - the README's order: a first start without a state dir makes the interface and two peers
 *   (one limited, one capped); the service then starts with a state dir on that interface and
 *   must adopt it (key, port, addresses, peers with their limit and cap);
 * - concurrent changes through the API, on several peers at once: cap raise ‖ usage reset, cap
 *   remove ‖ reset, limit ‖ limit, suspend ‖ limit; the list after them is what boot 2 must show;
 * - a peer removed behind the daemon's back (`wg set ... remove`), a list (so the daemon sees
 *   it), then a new create, which may take the freed address.
 *
 * What the kernel held and the API listed is kept for boot 2 (orders.json in each scenario dir).
 */
import { expect } from 'chai';
import { type DaemonProcess, api } from '../kernel/support/daemon';
import { assertInTestVm, linkExists, sh } from '../kernel/support/topology';
import {
  ADOPT,
  type Listed,
  RACES,
  REMOVED,
  create,
  kept,
  list,
  logged,
  peerPath,
  secondsSince,
  startWithStateDir,
  startWithoutStateDir,
  suspendedInKernel,
  writeOrdersRecord,
} from './support/orders';
import { bootId, kernelPicture, quotaName, resetScenario } from './support/scenarios';

/** tc's class of an address's limit (src/kernel/shaper/addressing.ts): 1:<low 16 bits, hex>. */
function classId(ip: string): string {
  const [, , c, d] = ip.split('.').map(Number);
  return `1:${((c << 8) | d).toString(16)}`;
}

describe('the README order, boot 1 of 2: a first start without a state dir makes wgad0 and peers; the service with a state dir adopts it (real kernel)', function () {
  this.timeout(240_000);
  const s = ADOPT;
  let daemon: DaemonProcess | undefined;
  let listed: Listed[] = [];
  let started = 0;

  before(function () {
    started = Date.now();
    assertInTestVm();
    resetScenario(s);
  });
  afterEach(function () {
    if (this.currentTest?.state === 'failed') {
      console.log(daemon?.output().split('\n').slice(-30).join('\n'));
    }
  });
  after(async function () {
    await daemon?.stop();
    console.log(`      scenario ${s.name}, boot 1: ${secondsSince(started)} s`);
  });

  it('the first start, without a state dir, makes the interface; two peers are created, one limited, one capped, and it stops with status 0', async () => {
    daemon = await startWithoutStateDir(s);
    expect(linkExists(s.ifname)).to.equal(true);
    const limited = await create(daemon);
    const capped = await create(daemon);
    const limit = await api(daemon, 'PATCH', peerPath(limited.publicKey, '/speed-limit'), {
      bytesPerSecond: 120_000,
    });
    expect(limit.status).to.equal(200);
    const cap = await api(daemon, 'PATCH', peerPath(capped.publicKey, '/data-cap'), {
      quotaBytes: 4_000_000,
    });
    expect(cap.status).to.equal(200);
    expect(await daemon.stop()).to.equal(0);
    daemon = undefined;
    expect(kernelPicture(s).peers).to.have.length(2);
  });

  it('the service, started with a state dir on that interface, adopts it: logged once at warn, the kernel unchanged', async () => {
    const before = kernelPicture(s);
    daemon = await startWithStateDir(s);
    const adopted = logged(daemon, 'interface_adopted');
    console.log(`      ${JSON.stringify(adopted)}`);
    expect(adopted.map((line) => line.level)).to.deep.equal([40]);
    expect(kernelPicture(s)).to.deep.equal(before);
  });

  it('lists the two peers with their limit and cap, then stops with status 0 (SIGTERM, as at a reboot)', async () => {
    listed = await list(daemon!);
    expect(listed.map((p) => p.speed_limit_bytes_per_second).sort()).to.deep.equal([120_000, null]);
    expect(listed.map((p) => p.data_cap?.quota_bytes ?? null).sort()).to.deep.equal([
      4_000_000,
      null,
    ]);
    expect(await daemon!.stop()).to.equal(0);
    daemon = undefined;
    writeOrdersRecord(s, {
      bootId: bootId(),
      listed,
      kernel: kernelPicture(s),
      suspended: suspendedInKernel(s.ifname),
      gone: [],
    });
  });
});

describe('concurrent changes to one peer, boot 1 of 2: cap raise ‖ reset, cap remove ‖ reset, limit ‖ limit, suspend ‖ limit on several peers at once, all answered (real kernel)', function () {
  this.timeout(240_000);
  const s = RACES;
  let daemon: DaemonProcess | undefined;
  let started = 0;
  /** Role → public key; three peers per kind of race. */
  const keys: Record<string, string> = {};
  const ips: Record<string, string> = {};
  const roles = (kind: string): string[] => [1, 2, 3].map((n) => `${kind}${n}`);

  before(async function () {
    started = Date.now();
    assertInTestVm();
    resetScenario(s);
    daemon = await startWithStateDir(s);
  });
  afterEach(function () {
    if (this.currentTest?.state === 'failed') {
      console.log(daemon?.output().split('\n').slice(-30).join('\n'));
    }
  });
  after(async function () {
    await daemon?.stop();
    console.log(`      scenario ${s.name}, boot 1: ${secondsSince(started)} s`);
  });

  it('makes twelve peers: caps of 1,000,000 bytes on six, limits of 100,000 B/s on six', async () => {
    const all = ['raise', 'remove', 'limit', 'suspend'].flatMap(roles);
    const made = await Promise.all(all.map(() => create(daemon!)));
    all.forEach((role, i) => {
      keys[role] = made[i].publicKey;
      ips[role] = made[i].ip;
    });
    const setup: Array<[string, string, object]> = [
      ...[...roles('raise'), ...roles('remove')].map((r): [string, string, object] => [
        r,
        '/data-cap',
        { quotaBytes: 1_000_000 },
      ]),
      ...[...roles('limit'), ...roles('suspend')].map((r): [string, string, object] => [
        r,
        '/speed-limit',
        { bytesPerSecond: 100_000 },
      ]),
    ];
    // One change per peer, all at once: changes to different peers run in parallel.
    const answers = await Promise.all(
      setup.map(([role, what, body]) => api(daemon!, 'PATCH', peerPath(keys[role], what), body)),
    );
    expect(answers.map((a) => a.status)).to.deep.equal(setup.map(() => 200));
    expect(new Set(Object.values(ips)).size).to.equal(12);
  });

  it('answers every change sent at the same time: 2xx, or 409 for a reset that found the cap removed', async () => {
    const requests: Array<[string, string, string, object | undefined]> = [];
    for (const r of roles('raise')) {
      requests.push([r, 'PATCH', '/data-cap', { quotaBytes: 2_000_000 }]);
      requests.push([r, 'POST', '/data-cap/reset', undefined]);
    }
    for (const r of roles('remove')) {
      requests.push([r, 'DELETE', '/data-cap', undefined]);
      requests.push([r, 'POST', '/data-cap/reset', undefined]);
    }
    for (const r of roles('limit')) {
      requests.push([r, 'PATCH', '/speed-limit', { bytesPerSecond: 150_000 }]);
      requests.push([r, 'PATCH', '/speed-limit', { bytesPerSecond: 250_000 }]);
    }
    for (const r of roles('suspend')) {
      requests.push([r, 'PATCH', '/suspension', { suspended: true }]);
      requests.push([r, 'PATCH', '/speed-limit', { bytesPerSecond: 300_000 }]);
    }
    const answers = await Promise.all(
      requests.map(([role, method, what, body]) =>
        api(daemon!, method, peerPath(keys[role], what), body).then(
          (reply) => `${role} ${method} ${what} ${reply.status} ${String(reply.body.code ?? '')}`,
        ),
      ),
    );
    console.log(`      ${answers.join('\n      ')}`);
    const unexpected = answers.filter(
      (a) => !/ 200 $/.test(a) && !/^remove\d POST \/data-cap\/reset 409 /.test(a),
    );
    expect(unexpected).to.deep.equal([]);
  });

  it('lists what the kernel holds after them (nft quotas, tc classes, the suspension set), then stops with status 0', async () => {
    const listed = await list(daemon!);
    const { quotas, classes } = kernelPicture(s);
    const suspended = suspendedInKernel(s.ifname);
    for (const peer of listed) {
      const quota = quotas[quotaName(peer.ip_address)];
      expect(peer.data_cap?.quota_bytes ?? null, `cap of ${peer.ip_address}`).to.equal(
        quota?.bytes ?? null,
      );
      const limit = peer.speed_limit_bytes_per_second;
      expect(limit, `limit of ${peer.ip_address} (tc class on ${s.ifname})`).to.equal(
        classes.dev[classId(peer.ip_address)] ?? null,
      );
      expect(limit, `limit of ${peer.ip_address} (tc class on its IFB)`).to.equal(
        classes.ifb[classId(peer.ip_address)] ?? null,
      );
      expect(peer.suspended, `suspension of ${peer.ip_address}`).to.equal(
        suspended.includes(peer.ip_address),
      );
    }
    // The raised caps are 2,000,000 whichever came first; the limits are one of the two sent.
    const byKey = new Map(listed.map((p) => [p.public_key, p]));
    for (const r of roles('raise')) {
      expect(byKey.get(keys[r])?.data_cap?.quota_bytes, r).to.equal(2_000_000);
    }
    for (const r of roles('limit')) {
      expect(byKey.get(keys[r])?.speed_limit_bytes_per_second, r).to.be.oneOf([150_000, 250_000]);
    }
    for (const r of roles('suspend')) expect(byKey.get(keys[r])?.suspended, r).to.equal(true);
    console.log(`      ${JSON.stringify(kept(listed))}`);
    expect(await daemon!.stop()).to.equal(0);
    daemon = undefined;
    writeOrdersRecord(s, {
      bootId: bootId(),
      listed,
      kernel: kernelPicture(s),
      suspended: suspendedInKernel(s.ifname),
      gone: [],
    });
  });
});

describe('a peer removed behind the daemon back, boot 1 of 2: `wg set ... remove`, a list, then a new create (real kernel)', function () {
  this.timeout(240_000);
  const s = REMOVED;
  let daemon: DaemonProcess | undefined;
  let started = 0;
  const peers: Array<{ publicKey: string; ip: string }> = [];

  before(async function () {
    started = Date.now();
    assertInTestVm();
    resetScenario(s);
    daemon = await startWithStateDir(s);
  });
  afterEach(function () {
    if (this.currentTest?.state === 'failed') {
      console.log(daemon?.output().split('\n').slice(-30).join('\n'));
    }
  });
  after(async function () {
    await daemon?.stop();
    console.log(`      scenario ${s.name}, boot 1: ${secondsSince(started)} s`);
  });

  it('makes three peers and caps the middle one; `wg set ... peer K remove` takes that one away; the list no longer shows it', async () => {
    for (let i = 0; i < 3; i++) peers.push(await create(daemon!));
    const capped = await api(daemon!, 'PATCH', peerPath(peers[1].publicKey, '/data-cap'), {
      quotaBytes: 1_000_000,
    });
    expect(capped.status).to.equal(200);
    sh(`wg set ${s.ifname} peer ${peers[1].publicKey} remove`);
    const keys = (await list(daemon!)).map((p) => p.public_key);
    expect(keys).to.have.members([peers[0].publicKey, peers[2].publicKey]);
  });

  it('a new create gets an address no listed peer has, and no cap; then it stops with status 0', async () => {
    const fresh = await create(daemon!);
    console.log(`      removed ${peers[1].ip}; the new peer got ${fresh.ip}`);
    const listed = await list(daemon!);
    const addresses = listed.map((p) => p.ip_address);
    expect(addresses).to.have.length(3);
    expect(new Set(addresses).size).to.equal(3);
    expect(listed.find((p) => p.public_key === fresh.publicKey)?.data_cap).to.equal(null);
    expect(await daemon!.stop()).to.equal(0);
    daemon = undefined;
    writeOrdersRecord(s, {
      bootId: bootId(),
      listed,
      kernel: kernelPicture(s),
      suspended: suspendedInKernel(s.ifname),
      gone: [peers[1].publicKey],
    });
  });
});
