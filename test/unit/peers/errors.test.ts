import { expect } from 'chai';
import { FacilityUnavailableError } from '../../../src/kernel/errors';
import {
  DomainError,
  FacilityMissingError,
  InterfaceMissingError,
  InterfaceNotWireGuardError,
  KernelFailureError,
  PeerNotFoundError,
  translateKernelError,
} from '../../../src/peers/errors';
import { netlinkError } from '../support/fake-kernel';

// DESIGN §3: 503 when the interface or a kernel facility is missing (say which and how to fix
// it); 500 otherwise, carrying the kernel's extended-ACK message.
describe('peers/errors: kernel errors in domain terms', () => {
  it('turns ENODEV from WireGuard or rtnetlink into InterfaceMissing naming the interface', () => {
    for (const facility of ['wireguard', 'link'] as const) {
      const error = translateKernelError(
        netlinkError('ENODEV', 'WG_CMD_GET_DEVICE wg7'),
        facility,
        'wg7',
      );
      expect(error).to.be.instanceOf(InterfaceMissingError);
      expect((error as DomainError).category).to.equal('unavailable');
      expect((error as Error).message).to.contain('wg7');
    }
  });

  it('turns EOPNOTSUPP from WG_CMD_GET_DEVICE (a link of another kind) into InterfaceNotWireGuard', () => {
    const error = translateKernelError(
      netlinkError('EOPNOTSUPP', 'WG_CMD_GET_DEVICE eth0'),
      'wireguard',
      'eth0',
    );
    expect(error).to.be.instanceOf(InterfaceNotWireGuardError);
  });

  it('turns a missing generic-netlink family (ENOENT) into FacilityMissing with modprobe wireguard', () => {
    const error = translateKernelError(
      netlinkError('ENOENT', 'CTRL_CMD_GETFAMILY wireguard'),
      'wireguard',
      'wg0',
    );
    expect(error).to.be.instanceOf(FacilityMissingError);
    expect((error as Error).message).to.contain('modprobe wireguard');
  });

  it("keeps the kernel layer's own FacilityUnavailableError text", () => {
    const error = translateKernelError(
      new FacilityUnavailableError('the IFB device (ifb)', 'modprobe ifb'),
      'shaper',
      'wg0',
    );
    expect(error).to.be.instanceOf(FacilityMissingError);
    expect((error as Error).message)
      .to.contain('the IFB device (ifb)')
      .and.contain('modprobe ifb');
  });

  it('names the tc modules for an unknown qdisc kind, with the kernel text', () => {
    const error = translateKernelError(
      netlinkError('ENOENT', 'RTM_NEWQDISC wg0', 'Error: Specified qdisc kind is unknown.'),
      'shaper',
      'wg0',
    );
    expect(error).to.be.instanceOf(FacilityMissingError);
    expect((error as Error).message)
      .to.contain('Specified qdisc kind is unknown')
      .and.contain('sch_htb');
  });

  it('makes anything else a KernelFailure (500) with operation, errno and extended-ACK text', () => {
    const error = translateKernelError(
      netlinkError('EINVAL', 'WG_CMD_SET_DEVICE wg0', 'Attribute failed policy validation'),
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
    const error = translateKernelError(netlinkError('EPERM', 'RTM_NEWLINK wg0'), 'link', 'wg0');
    expect((error as Error).message).to.contain('CAP_NET_ADMIN');
  });

  it('leaves domain errors and foreign errors alone', () => {
    const domain = new PeerNotFoundError();
    expect(translateKernelError(domain, 'wireguard', 'wg0')).to.equal(domain);
    const bug = new TypeError('x is undefined');
    expect(translateKernelError(bug, 'wireguard', 'wg0')).to.equal(bug);
  });
});
