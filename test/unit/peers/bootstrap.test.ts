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
