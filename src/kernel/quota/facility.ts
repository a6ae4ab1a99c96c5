/** What a refusal of nf_tables means for data caps: which module is missing, and the boundary's translation. */
import type { NetlinkError } from '../../netlink';
import { FacilityUnavailableError, type Translate } from '../errors';
import {
  NFNL_MSG_BATCH_BEGIN,
  NFT_MSG_GETCHAIN,
  NFT_MSG_GETGEN,
  NFT_MSG_GETOBJ,
  NFT_MSG_GETOBJ_RESET,
  NFT_MSG_GETRULE,
  NFT_MSG_GETSET,
  NFT_MSG_GETSETELEM,
  NFT_MSG_GETTABLE,
  NFT_MSG_NEWOBJ,
  NFT_MSG_NEWRULE,
  nftMessageType,
} from '../nftables/constants';

export const missingNfTables = (cause: unknown): FacilityUnavailableError =>
  new FacilityUnavailableError(
    'nf_tables (nfnetlink subsystem 10)',
    'load the kernel module: modprobe nf_tables',
    { cause },
  );
export const missingQuota = (cause: unknown): FacilityUnavailableError =>
  new FacilityUnavailableError(
    'nft_quota (nf_tables quota objects)',
    'load the kernel module: modprobe nft_quota',
    { cause },
  );
export const missingObjref = (cause: unknown): FacilityUnavailableError =>
  new FacilityUnavailableError(
    'nft_objref (nf_tables object maps)',
    'load the kernel module: modprobe nft_objref',
    { cause },
  );

/** nf_tables' GET requests (NFT_MSG_GET*, nf_tables.h), as nlmsg_types. */
export const NFT_GETS: ReadonlySet<number> = new Set(
  [
    NFT_MSG_GETTABLE,
    NFT_MSG_GETCHAIN,
    NFT_MSG_GETRULE,
    NFT_MSG_GETSET,
    NFT_MSG_GETSETELEM,
    NFT_MSG_GETGEN,
    NFT_MSG_GETOBJ,
    NFT_MSG_GETOBJ_RESET,
  ].map(nftMessageType),
);

/**
 * What a refusal of nf_tables means for data caps, by the message refused (its nlmsg_type, which
 * the error carries) and the errno; undefined when it means nothing in particular. The one place
 * that decides a facility is missing:
 * - a GET answered with a bare EINVAL: nfnetlink has no nf_tables subsystem (and could not load
 *   it); nf_tables itself always says why it refuses a well-formed request;
 * - BATCH_BEGIN answered EOPNOTSUPP: no subsystem to run the transaction;
 * - NEWOBJ answered ENOENT: the kernel failed to load nft-obj-2 (nft_quota);
 * - NEWRULE answered ENOENT or EOPNOTSUPP: it failed to load nft-expr-objref.
 * ENOENT can mean those only in batches where the table, chains and map exist or are created
 * before, which is how every batch of the data caps is written.
 */
function missingFacility(error: NetlinkError): FacilityUnavailableError | undefined {
  const type = error.messageType;
  if (type === undefined) return undefined;
  if (NFT_GETS.has(type) || type === NFNL_MSG_BATCH_BEGIN) return nfTablesMissing(error);
  switch (type) {
    case nftMessageType(NFT_MSG_NEWOBJ):
      return error.code === 'ENOENT' ? missingQuota(error) : undefined;
    case nftMessageType(NFT_MSG_NEWRULE):
      return error.code === 'ENOENT' || error.code === 'EOPNOTSUPP'
        ? missingObjref(error)
        : undefined;
    default:
      return undefined;
  }
}

/** The boundary of every public method: what a refusal means for data caps, else generic. */
export const quotaErrors: Translate = missingFacility;

/**
 * nf_tables itself missing, for a facility that needs no module beyond it (suspensions, names:
 * the set lookup is built into nf_tables.ko): a GET answered with a bare EINVAL, or a batch
 * refused with EOPNOTSUPP (see missingFacility above).
 */
function nfTablesMissing(error: NetlinkError): FacilityUnavailableError | undefined {
  const type = error.messageType;
  if (type === undefined) return undefined;
  if (NFT_GETS.has(type) && error.code === 'EINVAL' && !error.kernelMessage) {
    return missingNfTables(error);
  }
  if (type === NFNL_MSG_BATCH_BEGIN && error.code === 'EOPNOTSUPP') return missingNfTables(error);
  return undefined;
}

export const nfTablesErrors: Translate = nfTablesMissing;
