import { expect } from 'chai';
import {
  InterfaceMissingError,
  KernelCallError,
  atBoundary,
  errnoOf,
} from '../../../src/kernel/errors';
import { netlinkError } from '../support/fake-kernel';

// The kernel layer's boundary (wgctrl-go's execute): a raw NetlinkError never leaves it.
describe('kernel/errors: errno decided at the boundary', () => {
  it("applies the facility's reading of an errno for the call", async () => {
    const error = await atBoundary(
      () => Promise.reject(netlinkError('ENODEV', 'RTM_GETLINK wg0')),
      (e) => (e.code === 'ENODEV' ? new InterfaceMissingError('wg0', { cause: e }) : undefined),
    ).catch((e: unknown) => e);
    expect(error).to.be.instanceOf(InterfaceMissingError);
    expect((error as InterfaceMissingError).ifname).to.equal('wg0');
  });

  it("makes any other refusal a KernelCallError with operation, errno and the kernel's text", async () => {
    const error = await atBoundary(() =>
      Promise.reject(netlinkError('EINVAL', 'RTM_NEWTCLASS 1:2 dev wg0', 'Invalid rate')),
    ).catch((e: unknown) => e);
    expect(error).to.be.instanceOf(KernelCallError);
    expect(error).to.include({
      operation: 'RTM_NEWTCLASS 1:2 dev wg0',
      code: 'EINVAL',
      kernelMessage: 'Invalid rate',
    });
    expect(errnoOf(error)).to.equal('EINVAL');
  });

  it('lets typed errors and bugs pass unchanged', async () => {
    const typed = new InterfaceMissingError('wg0');
    expect(await atBoundary(() => Promise.reject(typed)).catch((e: unknown) => e)).to.equal(typed);
    const bug = new TypeError('x is undefined');
    expect(await atBoundary(() => Promise.reject(bug)).catch((e: unknown) => e)).to.equal(bug);
  });
});
