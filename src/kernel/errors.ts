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

/**
 * The host is set up in a way a facility cannot work with, and only the operator can change
 * that (an interface subnet wider than tc class ids can key, a link squatting on the IFB's name,
 * foreign filters in our tc priority). The message says what to change; the domain answers 409.
 */
export class SetupConflictError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'SetupConflictError';
  }
}

/**
 * What to do when the kernel has no WireGuard (the link kind and the generic netlink family are
 * both missing). Loading the module is enough when the kernel ships it; Debian's stock kernels
 * (linux-image-amd64) have it built since Linux 5.6.
 */
export const WIREGUARD_REMEDY =
  'load it with `modprobe wireguard` (as root); when modprobe finds no module, this kernel lacks ' +
  'WireGuard: install one that has it (Linux 5.6 or later; on Debian `apt install ' +
  'linux-image-amd64`) and reboot';

export { NetlinkError, isNetlinkError } from '../netlink/errors';
