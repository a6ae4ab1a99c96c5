/** What a refusal of nf_tables means for data caps: which module is missing, and the boundary's translation. */
import { isNetlinkError } from '../../netlink';
import { FacilityUnavailableError, KernelError, type Translate } from '../errors';

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

/**
 * Turns the kernel's answer to a transaction into what is missing, when that is what it says:
 * the batch itself refused (no nf_tables subsystem: EOPNOTSUPP on BATCH_BEGIN), a quota object
 * of an unknown type (ENOENT after the kernel failed to load nft-obj-2), a rule with an unknown
 * expression (ENOENT after it failed to load nft-expr-objref). Only valid for batches where the
 * table, chains and map exist or are created before, so ENOENT cannot mean those.
 */
export function translateCommitError(error: unknown): unknown {
  if (!isNetlinkError(error)) return error;
  // nfnetlink answers a request for a subsystem it does not have (and could not load) with a
  // bare EINVAL; nf_tables itself always says why it refuses a well-formed request.
  if (
    error.code === 'EINVAL' &&
    !error.kernelMessage &&
    error.operation.startsWith('NFT_MSG_GET')
  ) {
    return missingNfTables(error);
  }
  if (error.operation.startsWith('NFNL_MSG_BATCH_BEGIN') && error.code === 'EOPNOTSUPP') {
    return missingNfTables(error);
  }
  if (error.code === 'ENOENT' && error.operation.startsWith('NFT_MSG_NEWOBJ')) {
    return missingQuota(error);
  }
  if (
    (error.code === 'ENOENT' || error.code === 'EOPNOTSUPP') &&
    error.operation.startsWith('NFT_MSG_NEWRULE')
  ) {
    return missingObjref(error);
  }
  return error;
}

/** The boundary of every public method: what a refusal means for data caps, else generic. */
export const quotaErrors: Translate = (error) => {
  const translated = translateCommitError(error);
  return translated instanceof KernelError ? translated : undefined;
};
