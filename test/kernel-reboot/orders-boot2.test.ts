/**
 * Issue 28, "Done when" 2, boot 2 of 2: a fresh VM boot (no interface, no peer, no class, no
 * table) and the state dirs orders-boot1.test.ts left in the same `out` export. Per scenario
 * the daemon starts with its state dir, as the unit does after a reboot, and what it puts back
 * is read with wg, ip, tc and nft and through the API, against what boot 1's kernel held and
 * its list showed just before the SIGTERM:
 *
 * - the README's order: the adopted interface comes back with the same key, port and
 *   addresses, and its peers with their limit and cap;
 * - concurrent changes: every peer shows what the list showed (limit, cap and its usage,
 *   suspension), in the API and in the kernel;
 * - a peer removed behind the daemon's back: it is not back, and no two peers share an address.
 */
import { expect } from 'chai';
import { type DaemonProcess } from '../kernel/support/daemon';
import { assertInTestVm, linkExists, wgShowDump } from '../kernel/support/topology';
import {
  ADOPT,
  type OrdersRecord,
  RACES,
  REMOVED,
  kept,
  list,
  readOrdersRecord,
  secondsSince,
  startWithStateDir,
  suspendedInKernel,
} from './support/orders';
import { type Scenario, bootId, kernelPicture, nftPicture } from './support/scenarios';

/**
 * The shared frame of each scenario's boot 2: the record, a check that this is another boot
 * without the interface, the daemon started on the state dir (its last lines when a test
 * fails), its stop and the scenario's cost.
 */
function bootTwo(s: Scenario): { record: () => OrdersRecord; daemon: () => DaemonProcess } {
  let record: OrdersRecord | undefined;
  let daemon: DaemonProcess | undefined;
  let started = 0;
  before(async function () {
    started = Date.now();
    assertInTestVm();
    record = readOrdersRecord(s);
    expect(bootId(), 'another boot').to.not.equal(record.bootId);
    expect(linkExists(s.ifname), `${s.ifname} before the start`).to.equal(false);
    daemon = await startWithStateDir(s);
  });
  afterEach(function () {
    if (this.currentTest?.state === 'failed') {
      console.log(daemon?.output().split('\n').slice(-30).join('\n'));
    }
  });
  after(async function () {
    await daemon?.stop();
    console.log(`      scenario ${s.name}, boot 2: ${secondsSince(started)} s`);
  });
  return { record: () => record!, daemon: () => daemon! };
}

describe('the README order, boot 2 of 2: after a reboot the adopted interface and its peers are back (real kernel)', function () {
  this.timeout(240_000);
  const s = ADOPT;
  const { record, daemon } = bootTwo(s);

  it('puts the interface back with the same key (public key), listen port and addresses', () => {
    const kernel = kernelPicture(s);
    expect(kernel.publicKey, 'public key').to.equal(record().kernel.publicKey);
    expect(kernel.listenPort, 'listen port').to.equal(record().kernel.listenPort);
    expect(kernel.addresses, 'addresses').to.deep.equal(record().kernel.addresses);
  });

  it('puts the peers back with their allowed IPs, limit (tc) and cap (nft)', () => {
    const kernel = kernelPicture(s);
    expect(kernel.peers, 'wg show').to.deep.equal(record().kernel.peers);
    expect(kernel.classes, 'tc classes').to.deep.equal(record().kernel.classes);
    expect(kernel.quotas, 'nft quotas').to.deep.equal(record().kernel.quotas);
  });

  it('lists the peers as the service listed them before the reboot', async () => {
    expect(kept(await list(daemon()))).to.deep.equal(kept(record().listed));
  });
});

describe('concurrent changes to one peer, boot 2 of 2: after a reboot every peer shows what the list showed before it (real kernel)', function () {
  this.timeout(240_000);
  const s = RACES;
  const { record, daemon } = bootTwo(s);

  it('lists every peer with the limit, cap (quota and usage) and suspension listed before the reboot', async () => {
    // The whole list at once: the diff shows every peer that differs, by address and key.
    expect(kept(await list(daemon()))).to.deep.equal(kept(record().listed));
  });

  it('holds the same in the kernel: the tc classes, the nft quotas and the suspension set', () => {
    const kernel = kernelPicture(s);
    expect(kernel.peers, 'wg show').to.deep.equal(record().kernel.peers);
    expect(kernel.classes, 'tc classes').to.deep.equal(record().kernel.classes);
    expect(kernel.quotas, 'nft quotas').to.deep.equal(record().kernel.quotas);
    expect(suspendedInKernel(s.ifname), 'suspension set').to.deep.equal(record().suspended);
  });
});

describe('a peer removed behind the daemon back, boot 2 of 2: after a reboot it is not back and no two peers share an address (real kernel)', function () {
  this.timeout(240_000);
  const s = REMOVED;
  const { record, daemon } = bootTwo(s);

  it('the removed peer is not back: neither in the kernel (wg show) nor in the list', async () => {
    const inKernel = wgShowDump(s.ifname).peers.map((p) => p.publicKey);
    const listed = (await list(daemon())).map((p) => p.public_key);
    expect(inKernel, 'wg show').to.not.include.members(record().gone);
    expect(listed, 'GET /api/peers').to.not.include.members(record().gone);
    expect(inKernel.sort(), 'wg show').to.deep.equal(
      record()
        .listed.map((p) => p.public_key)
        .sort(),
    );
  });

  it('no two peers share an address, and each peer has the address and cap it had', async () => {
    const allowed = wgShowDump(s.ifname).peers.flatMap((p) => p.allowedIps);
    expect(new Set(allowed).size, `wg show: ${allowed.join(' ')}`).to.equal(allowed.length);
    const listed = await list(daemon());
    const addresses = listed.map((p) => p.ip_address);
    expect(new Set(addresses).size, `GET /api/peers: ${addresses.join(' ')}`).to.equal(
      addresses.length,
    );
    expect(kept(listed)).to.deep.equal(kept(record().listed));
    expect(nftPicture(s.ifname).quotas, 'nft quotas').to.deep.equal(record().kernel.quotas);
  });
});
