/**
 * The daemon with a state directory, end to end over HTTP, on the in-memory kernel and a real
 * directory: what a reboot (a new kernel, a new boot id) and an ordinary restart (the same
 * kernel, the same boot id) find. The real kernel's version of these is the reboot test in the VM.
 */
import { expect } from 'chai';
import {
  chmodSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  rmSync,
  statSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { EXIT_CONFIG, StartupError, startDaemon, type Daemon } from '../../../src/main';
import { FakeKernel } from '../support/fake-kernel';
import { testConfig } from '../support/config';
import { captureLog } from '../support/log-capture';
import { httpCall } from '../../support/http-call';
import { NO_PERIOD } from '../http/helpers';
import { peersWithoutReadAt } from '../../support/peer-list';

interface Answer {
  status: number;
  body: Record<string, unknown>;
}

async function call(
  daemon: Daemon,
  method: string,
  urlPath: string,
  body?: unknown,
): Promise<Answer> {
  const reply = await httpCall(daemon.address.port, method, urlPath, { body });
  return { status: reply.status, body: reply.json() };
}

async function text(daemon: Daemon, urlPath: string): Promise<string> {
  return (await httpCall(daemon.address.port, 'GET', urlPath)).text;
}

const enc = encodeURIComponent;

describe('daemon with --state-dir (issue 16)', () => {
  let dir: string;
  beforeEach(() => {
    dir = mkdtempSync(path.join(tmpdir(), 'wg-peerd-state-'));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  async function start(kernel: FakeKernel, bootId: string, log = captureLog()) {
    const daemon = await startDaemon(testConfig({ stateDir: path.join(dir, 'state') }), {
      openKernel: async () => kernel,
      logger: log.logger,
      readBootId: async () => bootId,
    });
    return { daemon, log };
  }

  it('puts everything back after a reboot: the same server key, peers, limits, and caps at the bytes counted', async () => {
    const before = new FakeKernel();
    const first = await start(before, 'boot-1');
    let created: Answer;
    try {
      created = await call(first.daemon, 'POST', '/api/peer');
      expect(created.status).to.equal(201);
      const key = enc((created.body['peer'] as { publicKey: string }).publicKey);
      expect((await call(first.daemon, 'POST', '/api/peer')).status).to.equal(201);
      expect(
        (
          await call(first.daemon, 'PATCH', `/api/peer/${key}/speed-limit`, {
            bytesPerSecond: 250000,
          })
        ).status,
      ).to.equal(200);
      expect(
        (await call(first.daemon, 'PATCH', `/api/peer/${key}/data-cap`, { quotaBytes: 10_000_000 }))
          .status,
      ).to.equal(200);
      before.setUsed('10.8.0.2', 9_900_000); // traffic the cap counted
    } finally {
      await first.daemon.shutdown(); // SIGTERM: the last checkpoint
    }
    const serverKey = before.serverPublicKey();

    const after = new FakeKernel(); // a reboot: no interface, nothing in the kernel
    const second = await start(after, 'boot-2');
    try {
      expect(after.serverPublicKey()).to.equal(serverKey);
      expect(after.devices.get('wg0')?.listenPort).to.equal(51820);
      const list = await call(second.daemon, 'GET', '/api/peers');
      const peers = peersWithoutReadAt(list.body['peers']);
      expect(peers.map((p) => p['ip_address'])).to.deep.equal(['10.8.0.2', '10.8.0.3']);
      expect(peers[0]).to.deep.include({
        speed_limit_bytes_per_second: 250000,
        data_cap: {
          quota_bytes: 10_000_000,
          used_bytes: 9_900_000,
          enforced: true,
          ...NO_PERIOD,
          after_cap: 'block',
          throttle_bytes_per_second: null,
          exhausted_at: null,
          throttled: false,
        },
      });
      expect(peers[1]).to.deep.include({ speed_limit_bytes_per_second: null, data_cap: null });
      const restoredLine = second.log.lines().find((l) => l['event'] === 'state_restored');
      expect(restoredLine).to.include({ mode: 'reboot', restoredPeers: 2, restoredCaps: 1 });
      const metrics = await text(second.daemon, '/metrics');
      expect(metrics).to.match(/^wg_peerd_state_restored_peers 2$/m);
      expect(metrics).to.match(/^wg_peerd_state_journal_bytes [1-9]\d*$/m);
      expect(metrics).to.match(/^wg_peerd_state_checkpoint_failures_total 0$/m);
      expect(metrics).to.match(/^wg_peerd_state_checkpoint_reads_total\{read="list"\} 0$/m);
      expect(metrics).to.match(/^wg_peerd_state_checkpoint_reads_total\{read="own"\} 0$/m);
    } finally {
      await second.daemon.shutdown();
    }
  });

  it("puts a cap's billing period back after a reboot, with its start and next reset", async () => {
    const before = new FakeKernel();
    const first = await start(before, 'boot-1');
    const start7 = Date.now() - 3_600_000;
    try {
      const created = await call(first.daemon, 'POST', '/api/peer');
      const key = enc((created.body['peer'] as { publicKey: string }).publicKey);
      const set = await call(first.daemon, 'PATCH', `/api/peer/${key}/data-cap`, {
        quotaBytes: 10_000_000,
        period: 'week',
        periodStart: new Date(start7).toISOString(),
      });
      expect(set.status).to.equal(200);
    } finally {
      await first.daemon.shutdown();
    }
    const after = new FakeKernel(); // a reboot: nothing in the kernel
    const second = await start(after, 'boot-2');
    try {
      const list = await call(second.daemon, 'GET', '/api/peers');
      const [peer] = peersWithoutReadAt(list.body['peers']);
      expect(peer!['data_cap']).to.deep.equal({
        quota_bytes: 10_000_000,
        used_bytes: 0,
        enforced: true,
        period: 'week',
        period_start: new Date(start7).toISOString(),
        next_reset: new Date(start7 + 7 * 86_400_000).toISOString(),
        previous_period_used_bytes: null,
        after_cap: 'block',
        throttle_bytes_per_second: null,
        exhausted_at: null,
        throttled: false,
      });
    } finally {
      await second.daemon.shutdown();
    }
  });

  it('puts a cap that throttles back after a reboot, with its rate, still throttling when used up', async () => {
    const before = new FakeKernel();
    const first = await start(before, 'boot-1');
    let key: string;
    try {
      const created = await call(first.daemon, 'POST', '/api/peer');
      key = enc((created.body['peer'] as { publicKey: string }).publicKey);
      const body = { quotaBytes: 5_000_000, afterCap: 'throttle', throttleBytesPerSecond: 20_000 };
      expect(
        (await call(first.daemon, 'PATCH', `/api/peer/${key}/data-cap`, body)).status,
      ).to.equal(200);
      before.setUsed('10.8.0.2', 5_000_000); // used up: throttled from here
    } finally {
      await first.daemon.shutdown();
    }
    const after = new FakeKernel(); // a reboot: nothing in the kernel
    const second = await start(after, 'boot-2');
    try {
      const list = await call(second.daemon, 'GET', '/api/peers');
      const peers = peersWithoutReadAt(list.body['peers']);
      expect(peers[0]?.['data_cap']).to.deep.equal({
        quota_bytes: 5_000_000,
        used_bytes: 5_000_000,
        enforced: true,
        ...NO_PERIOD,
        after_cap: 'throttle',
        throttle_bytes_per_second: 20_000,
        exhausted_at: null,
        throttled: true,
      });
      // What the kernel was asked to put back: the rate with the cap.
      const ensured = after.calls.filter((c) => c.method === 'quota.ensure').at(-1);
      expect(JSON.stringify(ensured?.args)).to.contain('"throttleBytesPerSecond":20000');
    } finally {
      await second.daemon.shutdown();
    }
  });

  it('keeps a peer deleted behind its back deleted after an ordinary restart (same boot)', async () => {
    const kernel = new FakeKernel();
    const first = await start(kernel, 'boot-1');
    let keyA: string;
    try {
      keyA = ((await call(first.daemon, 'POST', '/api/peer')).body['peer'] as { publicKey: string })
        .publicKey;
      await call(first.daemon, 'POST', '/api/peer');
    } finally {
      await first.daemon.shutdown();
    }
    // Behind the daemon's back (`wg set wg0 peer A remove`):
    await kernel.wireguard.removePeers('wg0', [keyA]);
    const second = await start(kernel, 'boot-1');
    try {
      const peers = (await call(second.daemon, 'GET', '/api/peers')).body['peers'] as {
        public_key: string;
      }[];
      expect(peers.map((p) => p.public_key)).not.to.include(keyA);
      expect(peers).to.have.length(1);
      const warning = second.log.lines().find((l) => l['event'] === 'peer_deleted_behind_back');
      expect(warning).to.include({ publicKey: keyA, level: 40 });
    } finally {
      await second.daemon.shutdown();
    }
  });

  it('refuses to start, exit status 2, on a state dir others may read, touching neither it nor the kernel', async () => {
    const state = path.join(dir, 'state');
    mkdirSync(state, { mode: 0o755 });
    chmodSync(state, 0o755);
    const kernel = new FakeKernel();
    let failure: unknown;
    try {
      await start(kernel, 'boot-1');
    } catch (error) {
      failure = error;
    }
    expect(failure).to.be.instanceOf(StartupError);
    expect((failure as StartupError).exitStatus).to.equal(EXIT_CONFIG);
    expect((failure as Error).message).to.contain(`chmod go= ${state}`);
    expect(kernel.links.has('wg0')).to.equal(false);
    expect(readdirSync(state)).to.deep.equal([]);
  });

  it('keeps the state dir private: 0700 directories, a 0600 journal and server key', async () => {
    const { daemon } = await start(new FakeKernel(), 'boot-1');
    await daemon.shutdown();
    const state = path.join(dir, 'state');
    expect(statSync(state).mode & 0o777).to.equal(0o700);
    expect(statSync(path.join(state, 'wg0')).mode & 0o777).to.equal(0o700);
    expect(statSync(path.join(state, 'wg0', 'journal')).mode & 0o777).to.equal(0o600);
    expect(statSync(path.join(state, 'wg0', 'server.key')).mode & 0o777).to.equal(0o600);
    expect(readFileSync(path.join(state, 'wg0', 'journal'), 'utf8')).not.to.contain('privateKey');
  });
});
