/**
 * Issue 31: with --state-dir the journal keeps peer names, so a daemon restart and a reboot
 * both show them again; a rename and a clear are journalled too, and a reboot's restore puts them
 * back into the kernel's names set as well. End to end over HTTP on the
 * in-memory kernel and file system; a new FakeKernel and boot id is the reboot.
 */
import { expect } from 'chai';
import { startDaemon, type Daemon } from '../../../src/main';
import { applyRecord, emptyState, peerRecord } from '../../../src/state/records';
import { FakeKernel } from '../support/fake-kernel';
import { testConfig } from '../support/config';
import { captureLog } from '../support/log-capture';
import { httpCall } from '../../support/http-call';
import { MemoryFs } from '../../support/memory-fs';

const STATE = '/var/lib/wg-peerd';

async function call(daemon: Daemon, method: string, urlPath: string, body?: unknown) {
  const reply = await httpCall(daemon.address.port, method, urlPath, { body });
  return { status: reply.status, body: reply.json() };
}

async function start(kernel: FakeKernel, fs: MemoryFs, bootId = 'boot-1') {
  return startDaemon(testConfig({ stateDir: STATE }), {
    openKernel: async () => kernel,
    logger: captureLog().logger,
    readBootId: async () => bootId,
    stateFs: fs,
  });
}

async function names(daemon: Daemon): Promise<unknown[]> {
  const peers = (await call(daemon, 'GET', '/api/peers')).body['peers'] as Array<
    Record<string, unknown>
  >;
  return peers.map((p) => p['name']);
}

describe('state: peer names kept with --state-dir (issue 31)', () => {
  it('shows every name again after a restart and after a reboot, renames and clears included', async () => {
    const fs = new MemoryFs();
    const kernel = new FakeKernel();
    const first = await start(kernel, fs);
    try {
      const keys: string[] = [];
      for (const name of ['kept', 'renamed', 'cleared']) {
        const created = await call(first, 'POST', '/api/peer', { name });
        keys.push(encodeURIComponent((created.body['peer'] as { publicKey: string }).publicKey));
      }
      await call(first, 'POST', '/api/peer');
      expect(
        (await call(first, 'PATCH', `/api/peer/${keys[1]}/name`, { name: 'new' })).status,
      ).to.equal(200);
      expect(
        (await call(first, 'PATCH', `/api/peer/${keys[2]}/name`, { name: null })).status,
      ).to.equal(200);
      expect(await names(first)).to.deep.equal(['kept', 'new', null, null]);
    } finally {
      await first.shutdown();
    }
    const restarted = await start(kernel, fs); // same kernel, same boot: a restart
    try {
      expect(await names(restarted)).to.deep.equal(['kept', 'new', null, null]);
    } finally {
      await restarted.shutdown();
    }
    const afterReboot = new FakeKernel();
    const rebooted = await start(afterReboot, fs.crashed(), 'boot-2');
    try {
      expect(await names(rebooted)).to.deep.equal(['kept', 'new', null, null]);
    } finally {
      await rebooted.shutdown();
    }
    // The reboot's restore put the names back into the kernel's names set too, so a daemon
    // started over that kernel without the state directory shows them.
    const names2 = [...afterReboot.namesSet.get('wg0')!.values()].map((n) => n.name);
    expect(names2).to.deep.equal(['kept', 'new']);
    const stateless = await startDaemon(testConfig(), {
      openKernel: async () => afterReboot,
      logger: captureLog().logger,
    });
    try {
      expect(await names(stateless)).to.deep.equal(['kept', 'new', null, null]);
    } finally {
      await stateless.shutdown();
    }
  });

  it('replays name records: set, changed, cleared, and a whole peer record keeps it', () => {
    const k = Buffer.alloc(32, 3).toString('base64');
    const state = emptyState();
    applyRecord(state, { t: 'peer', k, ips: ['10.8.0.2/32'], limit: null, cap: null });
    applyRecord(state, { t: 'name', k, n: 'a' });
    expect(state.peers.get(k)?.name).to.equal('a');
    expect(peerRecord(state.peers.get(k)!)).to.include({ n: 'a' });
    applyRecord(state, { t: 'name', k, n: null });
    expect(state.peers.get(k)).to.not.have.property('name');
  });
});
