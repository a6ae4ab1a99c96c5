/**
 * Issue 28: an interface the state directory does not hold is adopted at start, and a reboot
 * then puts it back as if the daemon had created it. The README's own order is the case: a first
 * start without a state dir creates wg0 and its peers; the service then starts with one; a
 * reboot (a new, empty kernel and a new boot id) must bring back the same key, port, addresses
 * and peers with their limit, cap (at its usage) and suspension. The daemon runs end to end over
 * HTTP on the in-memory kernel and the in-memory file system, whose `crashed()` is what a power
 * cut right after the start would leave on disk.
 */
import { expect } from 'chai';
import type { Daemon } from '../../../src/main';
import { FakeKernel } from '../support/fake-kernel';
import { STATE_DIR, startOnFake } from '../support/daemon-on-fake';
import { httpCall } from '../../support/http-call';
import { MemoryFs } from '../../support/memory-fs';

const STATE = STATE_DIR;

async function call(daemon: Daemon, method: string, urlPath: string, body?: unknown) {
  const reply = await httpCall(daemon.address.port, method, urlPath, { body });
  return { status: reply.status, body: reply.json() };
}

const start = startOnFake;

type ListedPeer = Record<string, unknown>;

async function listPeers(daemon: Daemon): Promise<ListedPeer[]> {
  const peers = (await call(daemon, 'GET', '/api/peers')).body['peers'] as ListedPeer[];
  // What survives a reboot (counters, handshakes and times do not).
  return peers.map((p) => ({
    public_key: p['public_key'],
    ip_address: p['ip_address'],
    speed_limit_bytes_per_second: p['speed_limit_bytes_per_second'],
    suspended: p['suspended'],
    quota: (p['data_cap'] as { quota_bytes: number } | null)?.quota_bytes ?? null,
    used: (p['data_cap'] as { used_bytes: number } | null)?.used_bytes ?? null,
  }));
}

/** The first start of the README: no state dir; three peers, one limited, one capped, one suspended. */
async function firstStartWithoutStateDir(kernel: FakeKernel): Promise<ListedPeer[]> {
  const { daemon } = await start(kernel);
  try {
    const keys: string[] = [];
    for (let i = 0; i < 3; i++) {
      const created = await call(daemon, 'POST', '/api/peer');
      expect(created.status).to.equal(201);
      keys.push(encodeURIComponent((created.body['peer'] as { publicKey: string }).publicKey));
    }
    const changes = [
      ['PATCH', `/api/peer/${keys[0]}/speed-limit`, { bytesPerSecond: 250_000 }],
      ['PATCH', `/api/peer/${keys[1]}/data-cap`, { quotaBytes: 10_000_000 }],
      ['PATCH', `/api/peer/${keys[2]}/suspension`, { suspended: true }],
    ] as const;
    for (const [method, urlPath, body] of changes) {
      expect((await call(daemon, method, urlPath, body)).status).to.equal(200);
    }
    kernel.setUsed('10.8.0.3', 4_000_000); // traffic the cap counted
    return await listPeers(daemon);
  } finally {
    await daemon.shutdown();
  }
}

describe('peers/restore: adopting an interface the state directory does not hold (issue 28)', () => {
  it("keeps the key, port, addresses and peers of the README's order across a reboot", async () => {
    const before = new FakeKernel();
    const listed = await firstStartWithoutStateDir(before);
    expect(listed).to.have.length(3);
    const serverKey = before.serverPublicKey();

    const fs = new MemoryFs();
    const service = await start(before, { fs }); // the systemd unit, with its state dir
    const onDisk = fs.crashed(); // a power cut right after the start
    try {
      expect(await listPeers(service.daemon)).to.deep.equal(listed);
    } finally {
      await service.daemon.shutdown();
    }

    const after = new FakeKernel(); // the reboot: no interface, nothing in the kernel
    const rebooted = await start(after, { fs: onDisk, bootId: 'boot-2' });
    try {
      expect(after.serverPublicKey()).to.equal(serverKey);
      expect(after.devices.get('wg0')?.listenPort).to.equal(51820);
      expect(after.links.get('wg0')?.addresses).to.deep.equal([
        { address: '10.8.0.1', prefixLength: 24 },
      ]);
      expect(await listPeers(rebooted.daemon)).to.deep.equal(listed);
      const restored = rebooted.log.lines().find((l) => l['event'] === 'state_restored');
      expect(restored).to.include({
        mode: 'reboot',
        restoredPeers: 3,
        restoredLimits: 1,
        restoredCaps: 1,
        restoredSuspensions: 1,
      });
    } finally {
      await rebooted.daemon.shutdown();
    }
  });

  it('says so once at warn, with the counts, and never logs the private key', async () => {
    const kernel = new FakeKernel();
    await firstStartWithoutStateDir(kernel);
    const fs = new MemoryFs();
    const { daemon, log } = await start(kernel, { fs });
    await daemon.shutdown();
    const adopted = log.lines().filter((l) => l['event'] === 'interface_adopted');
    expect(adopted).to.have.length(1);
    expect(adopted[0]).to.deep.include({
      level: 40,
      interface: 'wg0',
      publicKey: kernel.serverPublicKey(),
      previousPublicKey: null,
      listenPort: 51820,
      addresses: ['10.8.0.1/24'],
      peers: 3,
      limits: 1,
      caps: 1,
      suspensions: 1,
    });
    // One line for all: no warning per peer.
    expect(log.lines().filter((l) => l['event'] === 'peer_adopted')).to.deep.equal([]);
    const secret = kernel.devices.get('wg0')!.privateKey!.toString('base64');
    expect(log.text()).not.to.contain(secret);
    expect(fs.text(`${STATE}/wg0/server.key`).trim()).to.equal(secret);
    expect(fs.files.get(`${STATE}/wg0/server.key`)?.mode).to.equal(0o600);
  });

  it('adopts nothing on the next start: the state directory now holds the interface', async () => {
    const kernel = new FakeKernel();
    await firstStartWithoutStateDir(kernel);
    const fs = new MemoryFs();
    await (await start(kernel, { fs })).daemon.shutdown();
    const { daemon, log } = await start(kernel, { fs });
    await daemon.shutdown();
    expect(log.lines().filter((l) => l['event'] === 'interface_adopted')).to.deep.equal([]);
    expect(kernel.count('readPrivateKey')).to.equal(1);
  });

  it('adopts an interface whose key differs from the saved one, and a reboot brings back the new key', async () => {
    const fs = new MemoryFs();
    const first = new FakeKernel();
    await (await start(first, { fs })).daemon.shutdown(); // the daemon creates wg0, key saved
    const oldKey = first.serverPublicKey();
    // The operator replaces wg0 (same boot) with one of its own: another key, port and address.
    const replaced = FakeKernel.withInterface({ listenPort: 40000, address: '10.9.0.1' });
    replaced.putPeer('hS5kTn5b3Ve1pQHnaeNmZ2k4M5eyJ1xCqFe2hDeHjlA=', ['10.9.0.7/32']);
    const { daemon, log } = await start(replaced, { fs });
    await daemon.shutdown();
    const line = log.lines().find((l) => l['event'] === 'interface_adopted');
    expect(line).to.deep.include({
      previousPublicKey: oldKey,
      publicKey: replaced.serverPublicKey(),
      listenPort: 40000,
      addresses: ['10.9.0.1/24'],
      peers: 1,
    });
    const after = new FakeKernel();
    const rebooted = await start(after, { fs: fs.crashed(), bootId: 'boot-2' });
    try {
      expect(after.serverPublicKey()).to.equal(replaced.serverPublicKey());
      expect(after.devices.get('wg0')?.listenPort).to.equal(40000);
      expect(after.links.get('wg0')?.addresses).to.deep.equal([
        { address: '10.9.0.1', prefixLength: 24 },
      ]);
      expect(after.peers().map((p) => p.publicKey)).to.deep.equal([
        'hS5kTn5b3Ve1pQHnaeNmZ2k4M5eyJ1xCqFe2hDeHjlA=',
      ]);
    } finally {
      await rebooted.daemon.shutdown();
    }
  });
});
