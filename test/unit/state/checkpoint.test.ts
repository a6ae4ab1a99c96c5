import { expect } from 'chai';
import type { KernelDataCap } from '../../../src/kernel/types';
import { UsageCheckpoints } from '../../../src/peers/checkpoint';
import { StateStore } from '../../../src/state';
import { MemoryFs } from '../../support/memory-fs';
import { captureLog } from '../support/log-capture';

const A = 'hS5kTn5b3Ve1pQHnaeNmZ2k4M5eyJ1xCqFe2hDeHjlA=';
const B = 'xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg=';

async function setUp() {
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
  const checkpoints = new UsageCheckpoints({
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
    used,
    log,
    reads: () => reads,
    fail: () => (failNext = true),
    tick: () => tick(),
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
});
