import { constants } from 'node:os';
import { expect } from 'chai';
import {
  FacilityUnavailableError,
  InterfaceMissingError,
  KernelCallError,
  atBoundary,
  errnoOf,
} from '../../../src/kernel/errors';
import {
  NFNL_MSG_BATCH_BEGIN,
  NFT_MSG_DELOBJ,
  NFT_MSG_GETOBJ,
  NFT_MSG_GETSETELEM,
  NFT_MSG_GETTABLE,
  NFT_MSG_NEWOBJ,
  NFT_MSG_NEWRULE,
  nftMessageType,
} from '../../../src/kernel/nftables/constants';
import { quotaErrors } from '../../../src/kernel/quota/facility';
import { NetlinkError } from '../../../src/netlink';
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

// What an errno means depends on the message the kernel refused: the error carries its type
// (from the socket's sequence map), and the label is for people only.
describe('kernel/errors: meaning keyed on the refused message type, never on its label', () => {
  const refused = (
    code: keyof typeof constants.errno,
    messageType: number | undefined,
    operation = 'a label that says nothing',
  ): NetlinkError => new NetlinkError({ errno: constants.errno[code], operation, messageType });

  it('a bare EINVAL to any nf_tables GET: nf_tables is missing', () => {
    for (const msg of [NFT_MSG_GETTABLE, NFT_MSG_GETOBJ, NFT_MSG_GETSETELEM]) {
      const error = quotaErrors(refused('EINVAL', nftMessageType(msg)));
      expect(error).to.be.instanceOf(FacilityUnavailableError);
      expect((error as FacilityUnavailableError).facility).to.contain('nf_tables');
    }
  });

  it('EINVAL with the kernel’s own words is no missing module', () => {
    const said = new NetlinkError({
      errno: constants.errno.EINVAL,
      operation: 'x',
      kernelMessage: 'Invalid argument in table',
      messageType: nftMessageType(NFT_MSG_GETTABLE),
    });
    expect(quotaErrors(said)).to.equal(undefined);
  });

  it('EOPNOTSUPP to BATCH_BEGIN: no nf_tables subsystem to run the transaction', () => {
    const error = quotaErrors(refused('EOPNOTSUPP', NFNL_MSG_BATCH_BEGIN));
    expect((error as FacilityUnavailableError).facility).to.contain('nf_tables');
  });

  it('ENOENT to NEWOBJ names nft_quota; ENOENT or EOPNOTSUPP to NEWRULE names nft_objref', () => {
    const quota = quotaErrors(refused('ENOENT', nftMessageType(NFT_MSG_NEWOBJ)));
    expect((quota as FacilityUnavailableError).facility).to.contain('nft_quota');
    for (const code of ['ENOENT', 'EOPNOTSUPP'] as const) {
      const objref = quotaErrors(refused(code, nftMessageType(NFT_MSG_NEWRULE)));
      expect((objref as FacilityUnavailableError).facility).to.contain('nft_objref');
    }
  });

  it('reads nothing into a label: an nf_tables name on another message type means nothing', () => {
    expect(quotaErrors(refused('ENOENT', nftMessageType(NFT_MSG_DELOBJ), 'NFT_MSG_NEWOBJ q_1'))).to
      .be.undefined;
    expect(quotaErrors(refused('EINVAL', undefined, 'NFT_MSG_GETTABLE ip t'))).to.be.undefined;
    expect(quotaErrors(refused('ENOENT', nftMessageType(NFT_MSG_DELOBJ)))).to.be.undefined;
  });

  it('gives EPERM its remedy at the boundary, and no other errno one', async () => {
    const denied = await atBoundary(() =>
      Promise.reject(refused('EPERM', 16, 'RTM_NEWLINK wg0')),
    ).catch((e: unknown) => e);
    expect(denied).to.be.instanceOf(KernelCallError);
    expect((denied as KernelCallError).remedy).to.contain('CAP_NET_ADMIN');
    const invalid = new KernelCallError(refused('EINVAL', 16));
    expect(invalid.remedy).to.equal(undefined);
  });
});
