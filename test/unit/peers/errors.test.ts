import { expect } from 'chai';
import {
  FacilityUnavailableError,
  InterfaceMissingError as KernelInterfaceMissing,
  NotWireGuardError,
  SetupConflictError,
} from '../../../src/kernel/errors';
import {
  DomainError,
  FacilityMissingError,
  HostSetupConflictError,
  InterfaceMissingError,
  InterfaceNotWireGuardError,
  KernelFailureError,
  PeerNotFoundError,
  translateKernelError,
} from '../../../src/peers/errors';
import { kernelFailure } from '../support/fake-kernel';

// DESIGN §3: 503 when the interface or a kernel facility is missing (say which and how to fix
// it); 500 otherwise, carrying the kernel's extended-ACK message. The kernel layer has already
// decided what the errno means (test/unit/kernel/errors.test.ts); here only types are mapped.
describe('peers/errors: typed kernel errors in domain terms', () => {
  it('turns InterfaceMissing from any facility into InterfaceMissing naming the managed interface', () => {
    for (const facility of ['wireguard', 'link', 'shaper', 'quota'] as const) {
      const error = translateKernelError(new KernelInterfaceMissing('wg7'), facility, 'wg7');
      expect(error).to.be.instanceOf(InterfaceMissingError);
      expect((error as DomainError).category).to.equal('unavailable');
      expect((error as DomainError).code).to.equal('INTERFACE_MISSING');
      expect((error as Error).message).to.contain('wg7');
    }
  });

  it('turns NotWireGuard into InterfaceNotWireGuard', () => {
    const error = translateKernelError(new NotWireGuardError('eth0', null), 'wireguard', 'eth0');
    expect(error).to.be.instanceOf(InterfaceNotWireGuardError);
  });

  it("keeps the kernel layer's own FacilityUnavailable text (what is missing, how to fix it)", () => {
    const error = translateKernelError(
      new FacilityUnavailableError('the IFB device (ifb)', 'modprobe ifb'),
      'shaper',
      'wg0',
    );
    expect(error).to.be.instanceOf(FacilityMissingError);
    expect((error as DomainError).code).to.equal('FACILITY_MISSING');
    expect((error as Error).message)
      .to.contain('the IFB device (ifb)')
      .and.contain('modprobe ifb');
  });

  it('turns a setup conflict into HostSetupConflict (409) with its text', () => {
    const error = translateKernelError(new SetupConflictError('subnet too wide'), 'shaper', 'wg0');
    expect(error).to.be.instanceOf(HostSetupConflictError);
    expect((error as Error).message).to.equal('subnet too wide');
  });

  it('makes a generic kernel failure a KernelFailure (500) with operation, errno and extended-ACK text', () => {
    const error = translateKernelError(
      kernelFailure('EINVAL', 'WG_CMD_SET_DEVICE wg0', 'Attribute failed policy validation'),
      'wireguard',
      'wg0',
    );
    expect(error).to.be.instanceOf(KernelFailureError);
    expect((error as DomainError).category).to.equal('internal');
    expect((error as Error).message)
      .to.contain('WG_CMD_SET_DEVICE wg0')
      .and.contain('Attribute failed policy validation')
      .and.contain('EINVAL');
  });

  it('says how to fix EPERM', () => {
    const error = translateKernelError(kernelFailure('EPERM', 'RTM_NEWLINK wg0'), 'link', 'wg0');
    expect((error as Error).message).to.contain('CAP_NET_ADMIN');
  });

  it('leaves domain errors and foreign errors alone', () => {
    const domain = new PeerNotFoundError();
    expect(translateKernelError(domain, 'wireguard', 'wg0')).to.equal(domain);
    const bug = new TypeError('x is undefined');
    expect(translateKernelError(bug, 'wireguard', 'wg0')).to.equal(bug);
  });
});
