/**
 * Issue 31: a peer's preshared key is kept where the daemon keeps state. With --state-dir the
 * journal (mode 0600, as the server key's file) holds it, so a reboot puts the peer back with the
 * same key; an interface adopted by a start with a state dir keeps its peers' keys too (read
 * from the kernel's dump, which holds them). End to end over HTTP on the in-memory kernel and
 * file system; a new FakeKernel and boot id is the reboot.
 */
import { expect } from 'chai';
import type { Daemon } from '../../../src/main';
import { applyRecord, emptyState, peerRecord, type SavedPeer } from '../../../src/state/records';
import { FakeKernel } from '../support/fake-kernel';
import { startOnFake } from '../support/daemon-on-fake';
import { httpCall } from '../../support/http-call';
import { MemoryFs } from '../../support/memory-fs';

async function call(daemon: Daemon, method: string, urlPath: string, body?: unknown) {
  const reply = await httpCall(daemon.address.port, method, urlPath, { body });
  return { status: reply.status, body: reply.json(), text: reply.text };
}

const start = startOnFake;

interface Made {
  publicKey: string;
  presharedKey?: string;
}

async function create(daemon: Daemon, body?: unknown): Promise<Made> {
  const created = await call(daemon, 'POST', '/api/peer', body);
  expect(created.status).to.equal(201);
  return created.body['peer'] as Made;
}

const keyIn = (kernel: FakeKernel, publicKey: string): string | undefined =>
  kernel.presharedKeys.get(publicKey)?.toString('base64');

describe('state: preshared keys kept across a reboot (issue 31)', () => {
  it('puts every peer back with the preshared key it was given, and none where it had none', async () => {
    const fs = new MemoryFs();
    const before = new FakeKernel();
    const first = await start(before, { fs });
    let withKey: Made;
    let without: Made;
    try {
      withKey = await create(first.daemon, { presharedKey: true });
      without = await create(first.daemon);
    } finally {
      await first.daemon.shutdown();
    }
    const after = new FakeKernel();
    const rebooted = await start(after, { fs: fs.crashed(), bootId: 'boot-2' });
    try {
      expect(keyIn(after, withKey.publicKey)).to.equal(withKey.presharedKey);
      expect(after.presharedKeys.has(without.publicKey)).to.equal(false);
      const listed = await call(rebooted.daemon, 'GET', '/api/peers');
      const flags = (listed.body['peers'] as Array<Record<string, unknown>>).map((p) => [
        p['public_key'],
        p['preshared_key'],
      ]);
      expect(flags).to.deep.equal([
        [withKey.publicKey, true],
        [without.publicKey, false],
      ]);
      expect(listed.text).to.not.contain(withKey.presharedKey!);
      const lines = JSON.stringify([...first.log.lines(), ...rebooted.log.lines()]);
      expect(lines).to.not.contain(withKey.presharedKey!);
    } finally {
      await rebooted.daemon.shutdown();
    }
  });

  it('keeps the keys of an adopted interface: a start with a state dir reads them from the kernel', async () => {
    const kernel = new FakeKernel();
    const plain = await start(kernel); // no state dir: the kernel is the only store
    let made: Made;
    try {
      made = await create(plain.daemon, { presharedKey: true });
    } finally {
      await plain.daemon.shutdown();
    }
    const fs = new MemoryFs();
    const adopting = await start(kernel, { fs });
    await adopting.daemon.shutdown();
    const after = new FakeKernel();
    const rebooted = await start(after, { fs: fs.crashed(), bootId: 'boot-2' });
    try {
      expect(keyIn(after, made.publicKey)).to.equal(made.presharedKey);
    } finally {
      await rebooted.daemon.shutdown();
    }
  });
});

describe('state/records: the preshared key in a peer record (issue 31)', () => {
  it('replays a whole peer record to the same peer, key included, and leaves it out when none', () => {
    const peer: SavedPeer = {
      publicKey: Buffer.alloc(32, 1).toString('base64'),
      allowedIps: ['10.8.0.2/32'],
      limit: null,
      cap: null,
      presharedKey: Buffer.alloc(32, 7).toString('base64'),
    };
    const state = emptyState();
    applyRecord(state, peerRecord(peer));
    expect(state.peers.get(peer.publicKey)).to.deep.equal(peer);
    const bare: SavedPeer = { ...peer };
    delete bare.presharedKey;
    expect(peerRecord(bare)).to.not.have.property('psk');
  });
});
