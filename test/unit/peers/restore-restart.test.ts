/**
 * Issue 28, a restart in the same boot: what the kernel lost while the daemon was down is put
 * back from the journal (`systemctl reload nftables`, whose ruleset starts with `flush ruleset`,
 * or a tc flush), as the running daemon's repair would; an interface made again under another
 * ifindex is restored like a reboot even when an operator's config put peers back on it. End to
 * end over HTTP on the in-memory kernel and file system.
 */
import { expect } from 'chai';
import { startDaemon, type Daemon } from '../../../src/main';
import { FakeKernel } from '../support/fake-kernel';
import { testConfig } from '../support/config';
import { captureLog } from '../support/log-capture';
import { httpCall } from '../../support/http-call';
import { MemoryFs } from '../../support/memory-fs';
import { StateStore } from '../../../src/state';
import { peersWithoutReadAt } from '../../support/peer-list';

async function call(daemon: Daemon, method: string, urlPath: string, body?: unknown) {
  const reply = await httpCall(daemon.address.port, method, urlPath, { body });
  return { status: reply.status, body: reply.json() };
}

async function start(kernel: FakeKernel, fs: MemoryFs) {
  const log = captureLog();
  const daemon = await startDaemon(testConfig({ stateDir: '/state' }), {
    openKernel: async () => kernel,
    logger: log.logger,
    readBootId: async () => 'boot-1',
    stateFs: fs,
  });
  return { daemon, log };
}

async function listed(daemon: Daemon): Promise<Record<string, unknown>[]> {
  return peersWithoutReadAt((await call(daemon, 'GET', '/api/peers')).body['peers']);
}

/** A daemon with a state dir makes two peers: A limited, capped (a weekly plan) and suspended; B plain. */
async function twoPeers(kernel: FakeKernel, fs: MemoryFs): Promise<[string, string]> {
  const { daemon } = await start(kernel, fs);
  try {
    const keys: string[] = [];
    for (let i = 0; i < 2; i++) {
      const created = await call(daemon, 'POST', '/api/peer');
      keys.push((created.body['peer'] as { publicKey: string }).publicKey);
    }
    const a = encodeURIComponent(keys[0]!);
    const changes = [
      ['/speed-limit', { bytesPerSecond: 250_000 }],
      [
        '/data-cap',
        { quotaBytes: 10_000_000, period: 'week', periodStart: '2026-11-23T00:00:00.000Z' },
      ],
      ['/suspension', { suspended: true }],
    ] as const;
    for (const [suffix, body] of changes) {
      expect((await call(daemon, 'PATCH', `/api/peer/${a}${suffix}`, body)).status).to.equal(200);
    }
    kernel.setUsed('10.8.0.2', 6_000_000);
    return [keys[0]!, keys[1]!];
  } finally {
    await daemon.shutdown(); // its last checkpoint saves the usage
  }
}

describe('peers/restore: a restart repairs what the kernel lost, it does not forget (issue 28)', () => {
  it('puts back a limit, a cap at its saved usage and plan, and a suspension flushed while it was down', async () => {
    const kernel = new FakeKernel();
    const fs = new MemoryFs();
    const [keyA] = await twoPeers(kernel, fs);
    const before = (await listedAfter(kernel, fs))[0];
    // While the daemon is down: `nft flush ruleset` (caps and suspensions) and `tc qdisc del`.
    kernel.loseAllCaps();
    kernel.suspended.get('wg0')?.clear();
    kernel.limits.get('wg0')?.clear();

    const { daemon, log } = await start(kernel, fs);
    try {
      const peers = await listed(daemon);
      expect(peers[0]).to.deep.equal(before);
      expect(peers[0]).to.deep.include({
        public_key: keyA,
        speed_limit_bytes_per_second: 250_000,
        suspended: true,
      });
      expect(peers[0]!['data_cap']).to.deep.include({
        quota_bytes: 10_000_000,
        used_bytes: 6_000_000,
        period: 'week',
        period_start: '2026-11-23T00:00:00.000Z',
      });
      expect(kernel.caps.get('wg0')?.get('10.8.0.2')).to.deep.include({ usedBytes: 6_000_000 });
      expect(kernel.limits.get('wg0')?.get('10.8.0.2')).to.deep.include({
        bytesPerSecond: 250_000,
      });
      expect([...(kernel.suspended.get('wg0')?.keys() ?? [])]).to.deep.equal(['10.8.0.2']);
      const repairs = log.lines().filter((l) => l['event'] === 'kernel_repaired');
      expect(repairs.map((l) => [l['level'], l['facility'], l['publicKey']])).to.deep.equal([
        [40, 'shaper', keyA],
        [40, 'quota', keyA],
        [40, 'suspension', keyA],
      ]);
      expect(log.lines().find((l) => l['event'] === 'state_restored')).to.include({
        mode: 'restart',
        repaired: 3,
      });
    } finally {
      await daemon.shutdown();
    }
  });

  it('finishes a delete whose record is on disk but whose kernel change a kill -9 cut off: the peer goes, with its limit, cap and suspension', async () => {
    const kernel = new FakeKernel();
    const fs = new MemoryFs();
    const [keyA, keyB] = await twoPeers(kernel, fs);
    // A DELETE of A whose record reached the disk, then kill -9 before the kernel change.
    const store = await StateStore.open({ dir: '/state', interfaceName: 'wg0', fs });
    await store.recordDelete(keyA);
    const afterKill = fs.killed();
    expect(kernel.devices.get('wg0')!.peers.some((p) => p.publicKey === keyA)).to.equal(true);

    const { daemon, log } = await start(kernel, afterKill);
    try {
      expect((await listed(daemon)).map((p) => p['public_key'])).to.deep.equal([keyB]);
      expect(kernel.limits.get('wg0')?.has('10.8.0.2') ?? false).to.equal(false);
      expect(kernel.caps.get('wg0')?.has('10.8.0.2') ?? false).to.equal(false);
      expect(kernel.suspended.get('wg0')?.has('10.8.0.2') ?? false).to.equal(false);
      const finished = log.lines().filter((l) => l['event'] === 'delete_finished');
      expect(finished.map((l) => [l['level'], l['publicKey']])).to.deep.equal([[40, keyA]]);
    } finally {
      await daemon.shutdown();
    }
  });

  it('restores an interface made again under another ifindex like a reboot, though a config put peers on it', async () => {
    const kernel = new FakeKernel();
    const fs = new MemoryFs();
    const [keyA, keyB] = await twoPeers(kernel, fs);
    // `ip link del wg0` and wg-quick makes it again, same key, with one peer of its config.
    const privateKey = Buffer.from(kernel.devices.get('wg0')!.privateKey!);
    const oldIndex = kernel.links.get('wg0')!.info.index;
    kernel.links.delete('wg0');
    kernel.devices.delete('wg0');
    kernel.limits.delete('wg0');
    kernel.caps.delete('wg0');
    kernel.suspended.delete('wg0');
    kernel.addInterface();
    kernel.devices.get('wg0')!.privateKey = privateKey;
    const configPeer = 'Vd8nFWS7ayE9uwOVOVP8ZnAdsM8pqUAnh6S3BfgN2DI=';
    kernel.putPeer(configPeer, ['10.8.0.200/32']);
    expect(kernel.links.get('wg0')!.info.index).not.to.equal(oldIndex);

    const { daemon, log } = await start(kernel, fs);
    try {
      const peers = await listed(daemon);
      expect(peers.map((p) => p['public_key'])).to.have.members([configPeer, keyA, keyB]);
      expect(peers.find((p) => p['public_key'] === keyA)).to.deep.include({
        speed_limit_bytes_per_second: 250_000,
        suspended: true,
      });
      expect(log.lines().find((l) => l['event'] === 'state_restored')).to.include({
        mode: 'reboot',
        restoredPeers: 2,
      });
    } finally {
      await daemon.shutdown();
    }
  });
});

/** The list as an unchanged restart shows it (what a repair must give back). */
async function listedAfter(kernel: FakeKernel, fs: MemoryFs): Promise<Record<string, unknown>[]> {
  const { daemon } = await start(kernel, fs);
  try {
    return await listed(daemon);
  } finally {
    await daemon.shutdown();
  }
}
