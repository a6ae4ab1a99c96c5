/**
 * Errors a kernel facility raises in domain terms. The domain maps FacilityUnavailableError to
 * 503; everything else from the kernel arrives as NetlinkError (errno, code, kernel message).
 */
export class FacilityUnavailableError extends Error {
  constructor(
    /** What is missing, e.g. "WireGuard (generic netlink family \"wireguard\")". */
    readonly facility: string,
    /** What the operator can do about it, e.g. "modprobe wireguard". */
    readonly remedy: string,
    options?: { cause?: unknown },
  ) {
    super(`${facility} is not available in this kernel: ${remedy}`, options);
    this.name = 'FacilityUnavailableError';
  }
}

export { NetlinkError, isNetlinkError } from '../netlink/errors';
