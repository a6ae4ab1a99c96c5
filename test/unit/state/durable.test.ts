/**
 * PeerService's writes with a state directory: what is on disk when a change answers, how
 * concurrent changes share disk flushes, and what a full disk or a refusing kernel leaves behind.
 * The in-memory filesystem tells written from durable (test/support/memory-fs.ts).
 */
import { expect } from 'chai';
import { PeerService, StateWriteError } from '../../../src/peers';
import { UsageCheckpoints } from '../../../src/peers/checkpoint';
import { UsageFence } from '../../../src/peers/usage-fence';
import { restoreFromState } from '../../../src/peers/restore';
import { StateStore } from '../../../src/state';
import { MemoryFs } from '../../support/memory-fs';
import { FakeKernel, kernelFailure } from '../support/fake-kernel';
import { captureLog } from '../support/log-capture';
import { rejected } from '../support/rejected';

const DIR = '/var/lib/wg-peerd';

async function setUp(fs = new MemoryFs(), kernel = FakeKernel.withInterface()) {
  const store = await StateStore.open({ dir: DIR, interfaceName: 'wg0', fs });
  const log = captureLog();
  const usageFence = new UsageFence();
  const service = new PeerService({
    kernel,
    interfaceName: 'wg0',
    endpointHost: 'vpn.example.net',
    logger: log.logger,
    journal: store,
    usageFence,
  });
  // Wired as src/main.ts wires them.
  const checkpoints = new UsageCheckpoints({
    quota: kernel.quota,
    store,
    fence: usageFence,
    listReads: service.listReads,
    interfaceName: 'wg0',
    intervalMs: 10_000,
    logger: log.logger,
  });
  return { fs, kernel, store, service, log, checkpoints };
}

async function reopened(fs: MemoryFs): Promise<StateStore> {
  return StateStore.open({ dir: DIR, interfaceName: 'wg0', fs: fs.crashed() });
}

describe('peers/service with a state directory: durable writes (issue 16)', () => {
  it('has a created peer on disk when the create answers', async () => {
    const { fs, service } = await setUp();
    const created = await service.createPeer();
    const after = await reopened(fs);
    expect(after.state.peers.get(created.publicKey)?.allowedIps).to.deep.equal([
      `${created.ip}/32`,
    ]);
    expect(after.state.intents.size).to.equal(0);
  });

  it('makes 50 concurrent creates share disk flushes, each with its own address', async () => {
    const { fs, service, kernel } = await setUp();
    const before = fs.syncs;
    const created = await Promise.all(Array.from({ length: 50 }, () => service.createPeer()));
    const flushes = fs.syncs - before;
    // Two records per create (intent, commit): 100 flushes in a row without group commit. The
    // creates that arrive while the first batch is planned form a second one: four flushes.
    expect(flushes).to.be.at.most(4);
    expect(kernel.count('getDevice')).to.be.at.most(2 + 1);
    expect(new Set(created.map((c) => c.ip)).size).to.equal(50);
    expect(kernel.peers()).to.have.length(50);
    const after = await reopened(fs);
    expect(after.state.peers.size).to.equal(50);
  });

  it('has limits and caps on disk when they answer, and their removal too', async () => {
    const { fs, service } = await setUp();
    const { publicKey } = await service.createPeer();
    await service.setSpeedLimit(publicKey, 125_000);
    await service.setDataCap(publicKey, 5_000_000);
    expect((await reopened(fs)).state.peers.get(publicKey)).to.deep.include({
      limit: 125_000,
      cap: { quotaBytes: 5_000_000, usedBytes: 0 },
    });
    await service.removeSpeedLimit(publicKey);
    await service.removeDataCap(publicKey);
    expect((await reopened(fs)).state.peers.get(publicKey)).to.deep.include({
      limit: null,
      cap: null,
    });
    await service.deletePeer(publicKey);
    expect((await reopened(fs)).state.peers.has(publicKey)).to.equal(false);
  });

  it('answers a full disk with 507 STATE_WRITE_FAILED and leaves the kernel as it was', async () => {
    const { fs, service, kernel } = await setUp();
    const { publicKey } = await service.createPeer();
    fs.capacity = 0;
    const limit = await rejected(service.setSpeedLimit(publicKey, 125_000));
    expect(limit).to.be.instanceOf(StateWriteError);
    expect((limit as StateWriteError).code).to.equal('STATE_WRITE_FAILED');
    expect(kernel.count('shaper.setLimit')).to.equal(0);
    const create = await rejected(service.createPeer());
    expect(create).to.be.instanceOf(StateWriteError);
    expect(kernel.peers()).to.have.length(1);
    fs.capacity = Number.POSITIVE_INFINITY;
    await service.setSpeedLimit(publicKey, 125_000); // works again once there is room
    expect((await service.createPeer()).ip).to.equal('10.8.0.3'); // the reserved address is free
  });

  it('removes a created peer again when its commit cannot be saved: nobody could use it', async () => {
    const { fs, service, kernel, store } = await setUp();
    let appends = 0;
    const commit = store.commitCreates.bind(store);
    store.commitCreates = (peers) => {
      appends++;
      fs.capacity = 0;
      return commit(peers);
    };
    const error = await rejected(service.createPeer());
    expect(appends).to.equal(1);
    expect(error).to.be.instanceOf(StateWriteError);
    expect((error as Error).message).to.contain('the peer was removed again');
    expect(kernel.peers()).to.deep.equal([]);
  });

  it('saves the undoing record when the kernel refuses a change after its record', async () => {
    const { fs, service, kernel } = await setUp();
    const { publicKey } = await service.createPeer();
    await service.setSpeedLimit(publicKey, 100_000);
    kernel.fail('shaper.setLimit', kernelFailure('EINVAL', 'RTM_NEWTCLASS'));
    await rejected(service.setSpeedLimit(publicKey, 200_000));
    expect((await reopened(fs)).state.peers.get(publicKey)?.limit).to.equal(100_000);
  });

  it('removes, at the next start, a peer whose create was cut off between the kernel and its commit', async () => {
    const fs = new MemoryFs();
    const kernel = FakeKernel.withInterface();
    const { store, service } = await setUp(fs, kernel);
    const answered = await service.createPeer();
    // A crash: the intent is on disk and the peer in the kernel, the commit never written.
    const { publicKey } = await service.createPeer();
    const crashedStore = await reopened(fs);
    crashedStore.state.peers.delete(publicKey);
    crashedStore.state.intents.set(publicKey, ['10.8.0.3/32']);
    await store.close();
    const log = captureLog();
    await restoreFromState({
      kernel,
      store: crashedStore,
      interfaceName: 'wg0',
      ifindex: kernel.links.get('wg0')!.info.index,
      created: false,
      bootId: crashedStore.state.boot?.bootId ?? 'boot-1',
      logger: log.logger,
    });
    expect(kernel.peers().map((p) => p.publicKey)).to.deep.equal([answered.publicKey]);
    expect(log.lines().find((l) => l['event'] === 'create_never_answered')).to.include({
      publicKey,
      level: 40,
    });
  });

  it('has a suspension on disk when it answers, undone when the kernel refuses it, and puts it back before the peer after a reboot', async () => {
    const fs = new MemoryFs();
    const kernel = FakeKernel.withInterface();
    const { store, service } = await setUp(fs, kernel);
    const { publicKey, ip } = await service.createPeer();
    await service.setSuspension(publicKey, true);
    expect((await reopened(fs)).state.peers.get(publicKey)?.suspended).to.equal(true);
    kernel.fail('suspension.resume', kernelFailure('EINVAL', 'NFT_MSG_DELSETELEM'));
    await rejected(service.setSuspension(publicKey, false));
    expect((await reopened(fs)).state.peers.get(publicKey)?.suspended).to.equal(true);
    await store.close();

    // A reboot: the kernel lost the peer and its suspension.
    const rebooted = FakeKernel.withInterface();
    const saved = await reopened(fs);
    const summary = await restoreFromState({
      kernel: rebooted,
      store: saved,
      interfaceName: 'wg0',
      ifindex: rebooted.links.get('wg0')!.info.index,
      created: false,
      bootId: 'another-boot',
      logger: captureLog().logger,
    });
    expect([...rebooted.suspended.get('wg0')!]).to.deep.equal([[ip, publicKey]]);
    // Its time, phase by phase in the order they ran: what bench:restore sets beside the tools.
    expect(Object.keys(summary.phases)).to.include.ordered.members(['read', 'plan', 'suspension']);
    expect(Object.keys(summary.phases)).to.include.members(['wireguard', 'journal']);
    expect(Object.keys(summary.phases).at(-1)).to.equal('journal');
    const phaseSum = Object.values(summary.phases).reduce((a, b) => a + b, 0);
    expect(phaseSum).to.be.at.most(summary.milliseconds + Object.keys(summary.phases).length);
    const order = rebooted.calls.map((c) => c.method);
    expect(order.indexOf('suspension.ensure')).to.be.below(order.indexOf('addPeers'));
    expect(rebooted.peers().map((p) => p.publicKey)).to.deep.equal([publicKey]);
  });

  it('saves usage from the list’s read in flight, without a read of its own, but never over a reset made meanwhile', async () => {
    const { fs, service, kernel, checkpoints } = await setUp();
    const reset = await service.createPeer();
    const other = await service.createPeer();
    await service.setDataCap(reset.publicKey, 1_000_000);
    await service.setDataCap(other.publicKey, 1_000_000);
    kernel.setUsed(reset.ip, 600_000);
    kernel.setUsed(other.ip, 200_000);
    // A poll's read has counted both caps and is still in flight ...
    const dumps = kernel.count('quota.listCaps');
    const releaseList = kernel.hold('quota.listCaps');
    const list = service.snapshot();
    while (kernel.count('quota.listCaps') === dumps) await new Promise((r) => setImmediate(r));
    // ... when the API resets one: its record (usedBytes 0) is on disk, its kernel change runs.
    const releaseReset = kernel.hold('quota.resetCap');
    const resetting = service.resetDataCap(reset.publicKey);
    while (kernel.count('quota.resetCap') === 0) await new Promise((r) => setImmediate(r));
    const saving = checkpoints.checkpoint();
    releaseList();
    await list;
    await saving;
    expect(
      kernel.count('quota.listCaps') - dumps,
      'the checkpoint read nothing of its own',
    ).to.equal(1);
    const saved = (await reopened(fs)).state.peers;
    expect(
      saved.get(reset.publicKey)?.cap?.usedBytes,
      'the reset, not the count before it',
    ).to.equal(0);
    expect(saved.get(other.publicKey)?.cap?.usedBytes).to.equal(200_000);
    releaseReset();
    await resetting;
  });
});
