import { expect } from 'chai';
import type { KernelDataCap } from '../../../src/kernel/types';
import { type ListReads, UsageCheckpoints } from '../../../src/peers/checkpoint';
import type { UsageRead } from '../../../src/peers/snapshot';
import { UsageFence } from '../../../src/peers/usage-fence';
import { StateStore } from '../../../src/state';
import { MemoryFs } from '../../support/memory-fs';
import { captureLog } from '../support/log-capture';

const A = 'hS5kTn5b3Ve1pQHnaeNmZ2k4M5eyJ1xCqFe2hDeHjlA=';
const B = 'xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg=';

/** A list that is never read: nothing at hand, no next read, never read before. */
const NOBODY_POLLS: ListReads = {
  atHand: () => null,
  next: () => new Promise<UsageRead>(() => undefined),
  sinceLastRead: () => null,
};

async function setUp(list?: Partial<ListReads>) {
  const fs = new MemoryFs();
  const store = await StateStore.open({ dir: '/s', interfaceName: 'wg0', fs });
  await store.commitCreates([
    { publicKey: A, allowedIps: ['10.8.0.2/32'] },
    { publicKey: B, allowedIps: ['10.8.0.3/32'] },
  ]);
  await store.recordCap(A, { quotaBytes: 1000, usedBytes: 0 });
  await store.recordCap(B, { quotaBytes: 1000, usedBytes: 0 });
  const kernelCaps = new Map<string, KernelDataCap>([
    ['10.8.0.2', { quotaBytes: 1000, usedBytes: 0, enforced: true }],
    ['10.8.0.3', { quotaBytes: 1000, usedBytes: 0, enforced: true }],
  ]);
  let reads = 0;
  let failNext = false;
  const log = captureLog();
  let tick: () => void = () => undefined;
  const fence = new UsageFence();
  const sleeping: Array<() => void> = [];
  const checkpoints = new UsageCheckpoints({
    fence,
    ...(list === undefined ? {} : { listReads: { ...NOBODY_POLLS, ...list } }),
    sleep: () => new Promise<void>((resolve) => sleeping.push(resolve)),
    quota: {
      listCaps: () => {
        reads++;
        if (failNext) {
          failNext = false;
          return Promise.reject(new Error('nf_tables answered ENOBUFS'));
        }
        return Promise.resolve(new Map(kernelCaps));
      },
    },
    store,
    interfaceName: 'wg0',
    intervalMs: 10_000,
    logger: log.logger,
    now: () => 1_700_000_000_000,
    setInterval: (callback) => {
      tick = callback;
      return {};
    },
    clearInterval: () => undefined,
  });
  const used = (address: string, bytes: number): void => {
    kernelCaps.set(address, { quotaBytes: 1000, usedBytes: bytes, enforced: true });
  };
  return {
    fs,
    store,
    checkpoints,
    fence,
    used,
    log,
    reads: () => reads,
    fail: () => (failNext = true),
    tick: () => tick(),
    /** Ends the checkpoint's bounded wait for the list's next read: the interval is over. */
    intervalOver: () => sleeping.shift()?.(),
    waiting: () => sleeping.length,
  };
}

describe('peers/checkpoint: usage checkpoints (issue 16)', () => {
  it('saves what each cap counted, only where it changed, from one read of the caps', async () => {
    const t = await setUp();
    t.used('10.8.0.2', 400);
    await t.checkpoints.checkpoint();
    expect(t.reads()).to.equal(1);
    expect(t.checkpoints.stats.lastWritten).to.equal(1);
    expect(t.store.state.peers.get(A)?.cap?.usedBytes).to.equal(400);
    const size = t.fs.text('/s/wg0/journal').length;
    await t.checkpoints.checkpoint();
    expect(t.checkpoints.stats.lastWritten).to.equal(0);
    expect(t.fs.text('/s/wg0/journal').length).to.equal(size);
    expect(t.checkpoints.stats.lastAt).to.equal(1_700_000_000_000);
  });

  it('runs one checkpoint at a time: one due while another runs shares it', async () => {
    const t = await setUp();
    t.used('10.8.0.3', 9);
    await Promise.all([t.checkpoints.checkpoint(), t.checkpoints.checkpoint()]);
    expect(t.reads()).to.equal(1);
  });

  it('counts and logs a failed checkpoint at warn, and the next one saves again', async () => {
    const t = await setUp();
    t.fail();
    t.used('10.8.0.2', 10);
    await t.checkpoints.checkpoint();
    expect(t.checkpoints.stats.failures).to.equal(1);
    expect(t.log.lines().find((l) => l['event'] === 'usage_checkpoint_failed')).to.include({
      level: 40,
    });
    await t.checkpoints.checkpoint();
    expect(t.store.state.peers.get(A)?.cap?.usedBytes).to.equal(10);
  });

  it('checkpoints on its timer, and once more when stopped (shutdown)', async () => {
    const t = await setUp();
    t.checkpoints.start();
    t.used('10.8.0.2', 1);
    t.tick();
    await t.checkpoints.checkpoint();
    expect(t.store.state.peers.get(A)?.cap?.usedBytes).to.equal(1);
    t.used('10.8.0.2', 2);
    await t.checkpoints.stop();
    expect(t.store.state.peers.get(A)?.cap?.usedBytes).to.equal(2);
  });

  it('never saves a read that started before the last one it saved: usage never goes backwards (issue 28)', async () => {
    // A list read that started early and ended late is at hand after a checkpoint saved a
    // newer read of its own: its counts are older and must not be written over the newer ones.
    let atHand: UsageRead | null = null;
    const t = await setUp({
      atHand: () => (atHand === null ? null : Promise.resolve(atHand)),
    });
    const older = t.fence.token(); // the list's read starts here
    t.used('10.8.0.2', 700);
    await t.checkpoints.checkpoint(); // nothing at hand: a read of its own, newer
    expect(t.store.state.peers.get(A)?.cap?.usedBytes).to.equal(700);
    atHand = {
      caps: new Map([['10.8.0.2', { quotaBytes: 1000, usedBytes: 500, enforced: true }]]),
      token: older,
      startedAt: 1_699_999_999_000,
    };
    await t.checkpoints.checkpoint();
    expect(t.store.state.peers.get(A)?.cap?.usedBytes).to.equal(700);
  });

  it('saves the list’s shared read when one is at hand, and reads no caps of its own', async () => {
    let token = 0;
    const read = (used: number): UsageRead => ({
      caps: new Map([['10.8.0.2', { quotaBytes: 1000, usedBytes: used, enforced: true }]]),
      token,
      startedAt: 1_699_999_999_000,
    });
    let atHand: UsageRead | null = null;
    const t = await setUp({
      atHand: () => (atHand === null ? null : Promise.resolve(atHand)),
    });
    token = t.fence.token();
    atHand = read(700);
    await t.checkpoints.checkpoint();
    expect(t.reads(), 'no dump of its own').to.equal(0);
    expect(t.store.state.peers.get(A)?.cap?.usedBytes).to.equal(700);
    expect(t.checkpoints.stats.lastAt, 'the time its counts were read').to.equal(1_699_999_999_000);
    atHand = null; // nobody polls: it reads the caps itself
    t.used('10.8.0.2', 800);
    await t.checkpoints.checkpoint();
    expect(t.reads()).to.equal(1);
    expect(t.store.state.peers.get(A)?.cap?.usedBytes).to.equal(800);
    expect(t.checkpoints.stats.lastAt).to.equal(1_700_000_000_000);
    expect(t.checkpoints.stats).to.include({ sharedReads: 1, ownReads: 1, total: 2 });
  });

  it('reads the caps itself when the shared read fails', async () => {
    const t = await setUp({ atHand: () => Promise.reject(new Error('the WireGuard dump failed')) });
    t.used('10.8.0.3', 55);
    await t.checkpoints.checkpoint();
    expect(t.reads()).to.equal(1);
    expect(t.checkpoints.stats.failures).to.equal(0);
    expect(t.store.state.peers.get(B)?.cap?.usedBytes).to.equal(55);
  });

  it('never saves a count read before a reset of its cap ended: the reset’s zero stays', async () => {
    let release: () => void = () => undefined;
    let shared: Promise<UsageRead> | null = null;
    const t = await setUp({ atHand: () => shared });
    await t.store.checkpointUsage(
      new Map([
        [A, 900],
        [B, 100],
      ]),
    );
    // A list read starts and sees A at 950 and B at 150 ...
    const token = t.fence.token();
    shared = new Promise<UsageRead>((resolve) => {
      release = () =>
        resolve({
          caps: new Map([
            ['10.8.0.2', { quotaBytes: 1000, usedBytes: 950, enforced: true }],
            ['10.8.0.3', { quotaBytes: 1000, usedBytes: 150, enforced: true }],
          ]),
          token,
          startedAt: 1_699_999_999_500,
        });
    });
    // ... while A's cap is reset: the record first, then the kernel (PeerService.resetDataCap).
    await t.fence.around(A, () => t.store.recordCap(A, { quotaBytes: 1000, usedBytes: 0 }));
    const checkpoint = t.checkpoints.checkpoint();
    release();
    await checkpoint;
    expect(t.store.state.peers.get(A)?.cap?.usedBytes, 'the reset').to.equal(0);
    expect(t.store.state.peers.get(B)?.cap?.usedBytes, 'the other peer').to.equal(150);
    expect(t.reads()).to.equal(0);
  });

  it('does not save the count of a peer whose cap is being changed as it saves', async () => {
    const t = await setUp();
    let finish: () => void = () => undefined;
    const change = t.fence.around(A, () => new Promise<void>((resolve) => (finish = resolve)));
    t.used('10.8.0.2', 300);
    t.used('10.8.0.3', 30);
    await t.checkpoints.checkpoint();
    expect(t.store.state.peers.get(A)?.cap?.usedBytes).to.equal(0);
    expect(t.store.state.peers.get(B)?.cap?.usedBytes).to.equal(30);
    finish();
    await change;
    await t.checkpoints.checkpoint();
    expect(t.store.state.peers.get(A)?.cap?.usedBytes, 'the next read has it').to.equal(300);
  });

  it('between two list reads, waits for the next one instead of reading the caps itself', async () => {
    let next: (read: UsageRead) => void = () => undefined;
    const t = await setUp({
      sinceLastRead: () => 3_000, // the list was read 3 s ago: someone polls
      next: () => new Promise<UsageRead>((resolve) => (next = resolve)),
    });
    const checkpoint = t.checkpoints.checkpoint();
    await new Promise((resolve) => setImmediate(resolve));
    expect(t.waiting(), 'waiting, at most one interval').to.equal(1);
    next({
      caps: new Map([['10.8.0.2', { quotaBytes: 1000, usedBytes: 450, enforced: true }]]),
      token: t.fence.token(),
      startedAt: 1_700_000_002_000,
    });
    await checkpoint;
    expect(t.reads()).to.equal(0);
    expect(t.store.state.peers.get(A)?.cap?.usedBytes).to.equal(450);
    expect(t.checkpoints.stats).to.include({ sharedReads: 1, ownReads: 0 });
  });

  it('reads the caps itself when no list read starts within the interval it waited', async () => {
    const t = await setUp({ sinceLastRead: () => 29_000 }); // within three intervals: polled
    t.used('10.8.0.2', 120);
    const checkpoint = t.checkpoints.checkpoint();
    await new Promise((resolve) => setImmediate(resolve));
    t.intervalOver();
    await checkpoint;
    expect(t.reads()).to.equal(1);
    expect(t.store.state.peers.get(A)?.cap?.usedBytes).to.equal(120);
  });

  it('does not wait when nobody read the list within the last three intervals', async () => {
    for (const since of [null, 30_000, 3_600_000]) {
      const t = await setUp({ sinceLastRead: () => since });
      t.used('10.8.0.3', 77);
      await t.checkpoints.checkpoint();
      expect(t.waiting(), `list last read ${String(since)} ms ago`).to.equal(0);
      expect(t.reads()).to.equal(1);
      expect(t.store.state.peers.get(B)?.cap?.usedBytes).to.equal(77);
    }
  });

  it('at shutdown ends a wait for the list at once, and the last checkpoint reads the caps', async () => {
    const t = await setUp({ sinceLastRead: () => 1_000 });
    t.checkpoints.start();
    t.tick(); // a checkpoint now waits for the list's next read
    await new Promise((resolve) => setImmediate(resolve));
    expect(t.waiting()).to.equal(1);
    t.used('10.8.0.2', 999);
    await t.checkpoints.stop(); // never resolves the sleep: stop ends the wait itself
    expect(t.reads(), 'one read: the waiting checkpoint gave way to the last one').to.equal(1);
    expect(t.store.state.peers.get(A)?.cap?.usedBytes).to.equal(999);
  });
});
