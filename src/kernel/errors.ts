/**
 * The errors the kernel layer raises, decided where it meets netlink (as wgctrl-go's `execute`
 * turns ENOENT/ENODEV into os.ErrNotExist). Each facility knows which of its calls concern the
 * managed interface, which module a create needs and what an errno means for that call, so the
 * domain above never sees an errno: it maps these types, whatever read failed first.
 *
 * Every error leaving a public method of src/kernel is one of these, or a programming/protocol
 * error (NetlinkProtocolError, TypeError) that stays what it is.
 */
import { constants } from 'node:os';
import { type NetlinkError, isNetlinkError } from '../netlink/errors';

const { errno } = constants;

/** Base of every typed kernel error. */
export abstract class KernelError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** The named interface (the managed WireGuard interface, or a link the call needs) is gone. */
export class InterfaceMissingError extends KernelError {
  constructor(
    readonly ifname: string,
    options?: { cause?: unknown },
  ) {
    super(`interface ${ifname} does not exist`, options);
  }
}

/** The interface exists but is not a WireGuard device (WG_CMD_* answer EOPNOTSUPP). */
export class NotWireGuardError extends KernelError {
  constructor(
    readonly ifname: string,
    readonly kind: string | null,
    options?: { cause?: unknown },
  ) {
    super(`interface ${ifname} is not a WireGuard device${kind ? ` (kind ${kind})` : ''}`, options);
  }
}

/** A kernel facility (module, netlink family, subsystem) is missing: which one, and the fix. */
export class FacilityUnavailableError extends KernelError {
  constructor(
    /** What is missing, e.g. "WireGuard (generic netlink family \"wireguard\")". */
    readonly facility: string,
    /** What the operator can do about it, e.g. "modprobe wireguard". */
    readonly remedy: string,
    options?: { cause?: unknown },
  ) {
    super(`${facility} is not available in this kernel: ${remedy}`, options);
  }
}

/**
 * The host is set up in a way a facility cannot work with, and only the operator can change
 * that (an interface subnet wider than tc class ids can key, a link squatting on the IFB's name,
 * foreign filters in our tc priority). The message says what to change; the domain answers 409.
 */
export class SetupConflictError extends KernelError {}

/**
 * Any other refusal: the operation, the errno name and the kernel's extended-ACK text, so the
 * domain can report it verbatim (500).
 */
export class KernelCallError extends KernelError {
  readonly operation: string;
  /** errno name, e.g. "EINVAL". */
  readonly code: string;
  readonly errno: number;
  /** NLMSGERR_ATTR_MSG, when the kernel sent one. */
  readonly kernelMessage: string | undefined;
  /** What the operator can do about it, when the errno alone says (EPERM: the capability). */
  readonly remedy: string | undefined;

  constructor(error: NetlinkError) {
    super(error.message, { cause: error });
    this.operation = error.operation;
    this.code = error.code;
    this.errno = error.errno;
    this.kernelMessage = error.kernelMessage;
    this.remedy = REMEDIES.get(error.errno);
  }
}

/**
 * Remedies by errno (asm-generic/errno-base.h, as Node's os.constants has them). EPERM: every netlink request that changes
 * anything, and WireGuard's even to read (GENL_UNS_ADMIN_PERM), needs CAP_NET_ADMIN.
 */
const REMEDIES: ReadonlyMap<number, string> = new Map([
  [errno.EPERM, 'wg-peerd needs CAP_NET_ADMIN (run it as root)'],
]);

/**
 * What to do when the kernel has no WireGuard (the link kind and the generic netlink family are
 * both missing). Loading the module is enough when the kernel ships it; Debian's stock kernels
 * (linux-image-amd64) have it built since Linux 5.6.
 */
export const WIREGUARD_REMEDY =
  'load it with `modprobe wireguard` (as root); when modprobe finds no module, this kernel lacks ' +
  'WireGuard: install one that has it (Linux 5.6 or later; on Debian `apt install ' +
  'linux-image-amd64`) and reboot';

/** What a facility makes of one NetlinkError; undefined: a generic KernelCallError. */
export type Translate = (error: NetlinkError) => KernelError | undefined;

/**
 * Runs one public kernel operation and lets out only typed kernel errors: typed errors raised
 * inside pass unchanged, a NetlinkError goes through `translate` (the facility's own reading
 * of that errno for this call) or becomes a KernelCallError, anything else is a bug and passes.
 */
export async function atBoundary<T>(work: () => Promise<T>, translate?: Translate): Promise<T> {
  try {
    return await work();
  } catch (error) {
    throw typed(error, translate);
  }
}

/** The same translation for a caught error (for code that must continue after it). */
export function typed(error: unknown, translate?: Translate): unknown {
  if (error instanceof KernelError || !isNetlinkError(error)) return error;
  return translate?.(error) ?? new KernelCallError(error);
}

/**
 * The errno name of a failed kernel request, whether still raw or already typed as a
 * KernelCallError by an inner facility; for kernel-layer code only (the domain sees types).
 */
export function errnoOf(error: unknown): string | undefined {
  if (error instanceof KernelCallError) return error.code;
  if (isNetlinkError(error)) return error.code;
  return undefined;
}

/** The kernel's extended-ACK text of a failed request, raw or typed. */
export function kernelMessageOf(error: unknown): string | undefined {
  if (error instanceof KernelCallError || isNetlinkError(error)) return error.kernelMessage;
  return undefined;
}
