import { expect } from 'chai';
import nacl from 'tweetnacl';
import {
  InterfaceNotWireGuardError,
  KernelFailureError,
  ensureInterface,
} from '../../../src/peers';
import { FakeKernel, kernelFailure } from '../support/fake-kernel';
import { captureLog } from '../support/log-capture';

const OPTIONS = {
  interfaceName: 'wg0',
  address: { address: '10.8.0.1', prefixLength: 24 },
  listenPort: 51820,
};

// DESIGN §3: without an existing interface, the default start creates it (key, listen port
// 51820, 10.8.0.1/24 unless configured) and says so in the log.
describe('peers/bootstrap: the interface at start', () => {
  it('creates a missing interface: wireguard kind, private key, listen port, address, up', async () => {
    const kernel = new FakeKernel();
    const log = captureLog();
    const state = await ensureInterface(kernel, { ...OPTIONS, listenPort: 51999 }, log.logger);
    expect(state.created).to.equal(true);
    const link = kernel.links.get('wg0')!;
    expect(link.info.kind).to.equal('wireguard');
    expect(link.info.up).to.equal(true);
    expect(link.addresses).to.deep.equal([{ address: '10.8.0.1', prefixLength: 24 }]);
    const device = kernel.devices.get('wg0')!;
    expect(device.listenPort).to.equal(51999);
    expect(device.privateKey).to.have.length(32);
    // Clamped like wg genkey, and the reported public key is its X25519 public key.
    expect(device.privateKey![0]! & 7).to.equal(0);
    expect(device.privateKey![31]! & 0xc0).to.equal(0x40);
    const expectedPublic = Buffer.from(nacl.scalarMult.base(device.privateKey!)).toString('base64');
    expect(state.publicKey).to.equal(expectedPublic);
    expect(kernel.serverPublicKey()).to.equal(expectedPublic);
  });

  it('says in the log that it created the interface, without the private key', async () => {
    const kernel = new FakeKernel();
    const log = captureLog();
    await ensureInterface(kernel, OPTIONS, log.logger);
    const line = log.lines().find((l) => l['event'] === 'interface_created');
    expect(line).to.include({ interface: 'wg0', listenPort: 51820, address: '10.8.0.1/24' });
    const secret = kernel.devices.get('wg0')!.privateKey!.toString('base64');
    expect(log.text()).to.not.contain(secret);
  });

  it('uses an existing WireGuard interface as it is', async () => {
    const kernel = FakeKernel.withInterface({
      address: '10.9.0.1',
      prefixLength: 16,
      listenPort: 40000,
    });
    const log = captureLog();
    const state = await ensureInterface(kernel, OPTIONS, log.logger);
    expect(state).to.include({ created: false, listenPort: 40000 });
    expect(state.addresses).to.deep.equal([{ address: '10.9.0.1', prefixLength: 16 }]);
    expect(kernel.count('createWireGuard')).to.equal(0);
    expect(kernel.count('configureDevice')).to.equal(0);
  });

  it('refuses a name taken by a link of another kind', async () => {
    const kernel = new FakeKernel();
    kernel.addOtherLink('wg0', 'veth');
    const log = captureLog();
    let caught: unknown;
    try {
      await ensureInterface(kernel, OPTIONS, log.logger);
    } catch (error) {
      caught = error;
    }
    expect(caught).to.be.instanceOf(InterfaceNotWireGuardError);
    expect((caught as Error).message)
      .to.contain('wg0')
      .and.contain('veth');
    expect(kernel.count('createWireGuard')).to.equal(0);
  });

  it('deletes a half-made interface when configuring it fails', async () => {
    const kernel = new FakeKernel();
    kernel.fail('addIpv4Address', kernelFailure('EINVAL', 'RTM_NEWADDR', 'bad prefix'));
    const log = captureLog();
    let caught: unknown;
    try {
      await ensureInterface(kernel, OPTIONS, log.logger);
    } catch (error) {
      caught = error;
    }
    expect(caught).to.be.instanceOf(KernelFailureError);
    expect((caught as Error).message).to.contain('bad prefix');
    expect(kernel.links.has('wg0')).to.equal(false);
  });
});

// Issue 18: --address6 when the daemon creates the interface; else the interface's own global
// or unique-local IPv6 address; with a state dir, the address is kept like the others.
describe('peers/bootstrap: the IPv6 address at start (issue 18)', () => {
  const ADDRESS6 = { address: 'fd42::1', prefixLength: 64 };

  it('gives a created interface the --address6 address as well, before it goes up', async () => {
    const kernel = new FakeKernel();
    const log = captureLog();
    const state = await ensureInterface(kernel, { ...OPTIONS, address6: ADDRESS6 }, log.logger);
    expect(kernel.links.get('wg0')!.addresses6).to.deep.equal([ADDRESS6]);
    expect(state.addresses6).to.deep.equal([ADDRESS6]);
    const order = kernel.calls.map((c) => c.method);
    expect(order.indexOf('addIpv6Address')).to.be.lessThan(order.indexOf('setUp'));
    const line = log.lines().find((l) => l['event'] === 'interface_created');
    expect(line).to.include({ address: '10.8.0.1/24', address6: 'fd42::1/64' });
  });

  it('creates an IPv4-only interface without --address6, exactly as before', async () => {
    const kernel = new FakeKernel();
    const state = await ensureInterface(kernel, OPTIONS, captureLog().logger);
    expect(kernel.count('addIpv6Address')).to.equal(0);
    expect(state.addresses6).to.deep.equal([]);
  });

  it("uses an existing interface's own IPv6 address and ignores --address6", async () => {
    const kernel = FakeKernel.withInterface({ address6: 'fd99::5/112' });
    const state = await ensureInterface(
      kernel,
      { ...OPTIONS, address6: ADDRESS6 },
      captureLog().logger,
    );
    expect(state.addresses6).to.deep.equal([{ address: 'fd99::5', prefixLength: 112 }]);
    expect(kernel.count('addIpv6Address')).to.equal(0);
  });

  it('deletes a half-made interface when the kernel refuses the IPv6 address', async () => {
    const kernel = new FakeKernel();
    kernel.fail('addIpv6Address', kernelFailure('EACCES', 'RTM_NEWADDR', 'IPv6 is disabled'));
    let caught: unknown;
    try {
      await ensureInterface(kernel, { ...OPTIONS, address6: ADDRESS6 }, captureLog().logger);
    } catch (error) {
      caught = error;
    }
    expect(caught).to.be.instanceOf(KernelFailureError);
    expect(kernel.links.has('wg0')).to.equal(false);
  });

  it('saves the IPv6 address with the interface, and recreates it from the state dir as saved', async () => {
    let saved: { listenPort: number; addresses: string[]; publicKey: string } | null = null;
    let savedKey: Buffer | null = null;
    const store = () => ({
      iface: saved,
      readServerKey: () => Promise.resolve(savedKey),
      saveInterface: (key: Buffer, iface: NonNullable<typeof saved>) => {
        savedKey = Buffer.from(key);
        saved = iface;
        return Promise.resolve();
      },
    });
    await ensureInterface(
      new FakeKernel(),
      { ...OPTIONS, address6: ADDRESS6, saved: store() },
      captureLog().logger,
    );
    expect(saved!.addresses).to.deep.equal(['10.8.0.1/24', 'fd42::1/64']);
    // After a reboot, started without --address6: the saved address comes back, with a warning.
    const kernel = new FakeKernel();
    const log = captureLog();
    const state = await ensureInterface(kernel, { ...OPTIONS, saved: store() }, log.logger);
    expect(state.addresses6).to.deep.equal([ADDRESS6]);
    expect(kernel.links.get('wg0')!.addresses6).to.deep.equal([ADDRESS6]);
    expect(log.lines().some((l) => l['event'] === 'interface_settings_kept')).to.equal(true);
  });
});

// Issue 28: with a state dir, a found interface the directory does not hold is saved as its own
// (the key read back from the kernel, port, addresses), so a reboot can make it again as it was.
describe('peers/bootstrap: adopting a found interface (issue 28)', () => {
  type Saved = { listenPort: number; addresses: string[]; publicKey: string };

  /** A state dir's interface part in memory; `keys` holds every key handed to saveInterface. */
  function memoryStore(initial: Saved | null = null, initialKey: Buffer | null = null) {
    const store = {
      saved: initial,
      savedKey: initialKey,
      handed: [] as Buffer[],
      get iface() {
        return store.saved;
      },
      readServerKey: () => Promise.resolve(store.savedKey && Buffer.from(store.savedKey)),
      saveInterface: (key: Buffer, iface: Saved) => {
        store.handed.push(key);
        store.savedKey = Buffer.from(key);
        store.saved = iface;
        return Promise.resolve();
      },
    };
    return store;
  }

  it('saves the key read back from the kernel, the port and every address, then zeroes the key', async () => {
    const kernel = FakeKernel.withInterface({
      listenPort: 40000,
      address: '10.9.0.1',
      prefixLength: 16,
      address6: 'fd99::1/64',
    });
    const kernelKey = Buffer.from(kernel.devices.get('wg0')!.privateKey!);
    const store = memoryStore();
    const state = await ensureInterface(kernel, { ...OPTIONS, saved: store }, captureLog().logger);
    expect(store.savedKey?.equals(kernelKey)).to.equal(true);
    expect(store.saved).to.deep.equal({
      listenPort: 40000,
      addresses: ['10.9.0.1/16', 'fd99::1/64'],
      publicKey: kernel.serverPublicKey(),
    });
    expect(state.adopted).to.deep.equal({ ...store.saved, previousPublicKey: null });
    expect(store.handed[0]!.equals(Buffer.alloc(32))).to.equal(true); // zeroed once saved
    expect(kernel.count('configureDevice')).to.equal(0); // the interface itself is left as it is
  });

  it('adopts one saved with another key, naming the key it replaces', async () => {
    const kernel = FakeKernel.withInterface();
    const other = { listenPort: 51820, addresses: ['10.8.0.1/24'], publicKey: 'other-key' };
    const store = memoryStore(other, Buffer.alloc(32, 1));
    const state = await ensureInterface(kernel, { ...OPTIONS, saved: store }, captureLog().logger);
    expect(state.adopted?.previousPublicKey).to.equal('other-key');
    expect(store.saved?.publicKey).to.equal(kernel.serverPublicKey());
  });

  it('adopts nothing the state dir already holds, nothing without a state dir, nothing without a key', async () => {
    const held = FakeKernel.withInterface();
    const mine = {
      listenPort: 51820,
      addresses: ['10.8.0.1/24'],
      publicKey: held.serverPublicKey()!,
    };
    const store = memoryStore(mine, Buffer.alloc(32, 1));
    expect(
      (await ensureInterface(held, { ...OPTIONS, saved: store }, captureLog().logger)).adopted,
    ).to.equal(null);
    expect(store.handed).to.deep.equal([]);
    const bare = FakeKernel.withInterface();
    expect((await ensureInterface(bare, OPTIONS, captureLog().logger)).adopted).to.equal(null);
    const keyless = FakeKernel.withInterface({ withKey: false });
    const none = memoryStore();
    expect(
      (await ensureInterface(keyless, { ...OPTIONS, saved: none }, captureLog().logger)).adopted,
    ).to.equal(null);
    expect(none.saved).to.equal(null);
    for (const kernel of [held, bare, keyless]) expect(kernel.count('readPrivateKey')).to.equal(0);
  });

  it('adopts again an interface saved without its key file (server.key removed), so a reboot keeps the key', async () => {
    const kernel = FakeKernel.withInterface();
    const mine = {
      listenPort: 51820,
      addresses: ['10.8.0.1/24'],
      publicKey: kernel.serverPublicKey()!,
    };
    const store = memoryStore(mine, null);
    const state = await ensureInterface(kernel, { ...OPTIONS, saved: store }, captureLog().logger);
    expect(state.adopted?.previousPublicKey).to.equal(kernel.serverPublicKey());
    expect(store.savedKey?.equals(kernel.devices.get('wg0')!.privateKey!)).to.equal(true);
  });

  it('makes an adopted interface again after a reboot with every saved address and the same key', async () => {
    const store = memoryStore();
    const found = FakeKernel.withInterface({
      listenPort: 40000,
      address: '10.9.0.1',
      prefixLength: 16,
    });
    found.links.get('wg0')!.addresses.push({ address: '10.9.1.1', prefixLength: 24 });
    await ensureInterface(found, { ...OPTIONS, saved: store }, captureLog().logger);
    const after = new FakeKernel();
    const state = await ensureInterface(after, { ...OPTIONS, saved: store }, captureLog().logger);
    expect(state).to.include({ created: true, listenPort: 40000, adopted: null });
    expect(after.serverPublicKey()).to.equal(found.serverPublicKey());
    expect(after.links.get('wg0')!.addresses).to.deep.equal([
      { address: '10.9.0.1', prefixLength: 16 },
      { address: '10.9.1.1', prefixLength: 24 },
    ]);
  });

  it('gives the configured IPv4 address to an adopted interface that had none, after a reboot', async () => {
    const store = memoryStore();
    const found = FakeKernel.withInterface({ withAddress: false, address6: 'fd42::1/64' });
    await ensureInterface(found, { ...OPTIONS, saved: store }, captureLog().logger);
    expect(store.saved?.addresses).to.deep.equal(['fd42::1/64']);
    const after = new FakeKernel();
    await ensureInterface(after, { ...OPTIONS, saved: store }, captureLog().logger);
    expect(after.links.get('wg0')!.addresses).to.deep.equal([OPTIONS.address]);
    expect(after.links.get('wg0')!.addresses6).to.deep.equal([
      { address: 'fd42::1', prefixLength: 64 },
    ]);
  });
});
