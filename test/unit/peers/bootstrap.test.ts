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
