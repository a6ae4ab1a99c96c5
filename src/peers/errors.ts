/**
 * Domain errors of the peer service, and the one place where the kernel layer's typed errors
 * (src/kernel/errors.ts) become them. The kernel layer already decided what an errno means for
 * the call that got it; nothing here knows errno or netlink, and nothing here knows HTTP (the
 * HTTP layer maps `category` to a status code).
 */
import { JournalBrokenError, StateReadOnlyError } from '../state';
import * as kernel from '../kernel/errors';

/** What kind of failure it is; the HTTP layer turns it into 400/404/409/503/500. */
export type ErrorCategory =
  'validation' | 'not_found' | 'conflict' | 'unavailable' | 'storage' | 'internal';

export interface ValidationDetail {
  /** JSON pointer into the request part, e.g. "/bytesPerSecond", or the parameter name. */
  field: string;
  message: string;
}

export abstract class DomainError extends Error {
  abstract readonly category: ErrorCategory;
  /** UPPER_SNAKE code, stable for clients. */
  readonly code: string;

  constructor(code: string, message: string) {
    super(message);
    this.code = code;
    this.name = new.target.name;
  }
}

export class ValidationError extends DomainError {
  readonly category = 'validation';
  readonly details: ValidationDetail[];

  constructor(message: string, details: ValidationDetail[] = [], code = 'VALIDATION_FAILED') {
    super(code, message);
    this.details = details;
  }
}

/** The SPEC's status value for an unknown peer doubles as the error text. */
export const PEER_NOT_FOUND_MESSAGE = 'Peer not found in VPN';

export class PeerNotFoundError extends DomainError {
  readonly category = 'not_found';
  constructor() {
    super('PEER_NOT_FOUND', PEER_NOT_FOUND_MESSAGE);
  }
}

export class PoolExhaustedError extends DomainError {
  readonly category = 'conflict';
  constructor(ifname: string, subnet: string) {
    super(
      'ADDRESS_POOL_EXHAUSTED',
      `No free address left in ${subnet} of ${ifname}: every host address is the server's or ` +
        `inside a peer's allowed IPs; delete unused peers or give ${ifname} a larger subnet`,
    );
  }
}

/** The peer exists but has no single IPv4 tunnel address (/32 allowed IP) to hang limits on. */
export class PeerWithoutAddressError extends DomainError {
  readonly category = 'conflict';
  constructor(what: string) {
    super(
      'PEER_HAS_NO_TUNNEL_ADDRESS',
      `The peer has no IPv4 /32 allowed IP, and a ${what} is tied to the peer's tunnel address`,
    );
  }
}

/** A reset of a cap the peer does not have. */
export class NoDataCapError extends DomainError {
  readonly category = 'conflict';
  constructor() {
    super(
      'PEER_HAS_NO_DATA_CAP',
      'The peer has no data cap to reset: set one with PATCH /api/peer/<publicKey>/data-cap',
    );
  }
}

/** The host's setup keeps a facility from working (the kernel layer says what to change). */
export class HostSetupConflictError extends DomainError {
  readonly category = 'conflict';
  constructor(message: string) {
    super('HOST_SETUP_CONFLICT', message);
  }
}

/** Base of the 503 family: something the host must provide is not there. */
export abstract class UnavailableError extends DomainError {
  readonly category = 'unavailable';
}

export class InterfaceMissingError extends UnavailableError {
  constructor(ifname: string) {
    super(
      'INTERFACE_MISSING',
      `Interface ${ifname} does not exist; restart wg-peerd to create it ` +
        `(or create it yourself: ip link add ${ifname} type wireguard)`,
    );
  }
}

export class InterfaceNotWireGuardError extends UnavailableError {
  constructor(ifname: string, kind: string | null) {
    super(
      'INTERFACE_NOT_WIREGUARD',
      `Interface ${ifname} is not a WireGuard interface${kind ? ` (it is of kind ${kind})` : ''}; ` +
        `start wg-peerd with --interface naming a WireGuard interface or a free name`,
    );
  }
}

export class InterfaceNotReadyError extends UnavailableError {
  constructor(ifname: string, what: 'address' | 'key') {
    super(
      what === 'address' ? 'INTERFACE_HAS_NO_ADDRESS' : 'INTERFACE_HAS_NO_KEY',
      what === 'address'
        ? `Interface ${ifname} has no IPv4 address to give peers addresses from; ` +
            `add one (ip address add 10.8.0.1/24 dev ${ifname})`
        : `Interface ${ifname} has no private key, so it has no public key to give peers; ` +
            `set one (wg set ${ifname} private-key FILE)`,
    );
  }
}

export class EndpointUnknownError extends UnavailableError {
  constructor() {
    super(
      'ENDPOINT_UNKNOWN',
      'The host has no default route to take its primary IPv4 address from, so the server ' +
        'endpoint is unknown; start wg-peerd with --endpoint-host HOST',
    );
  }
}

export type Facility =
  'wireguard' | 'link' | 'shaper' | 'quota' | 'suspension' | 'names' | 'expiry';

const FACILITY_HELP: Readonly<Record<Facility, { what: string; fix: string }>> = {
  wireguard: {
    what: 'WireGuard (generic netlink family "wireguard")',
    fix: kernel.WIREGUARD_REMEDY,
  },
  link: {
    what: 'rtnetlink',
    fix: 'run wg-peerd on a Linux kernel with rtnetlink',
  },
  shaper: {
    what: 'traffic control for speed limits (HTB qdisc, u32 classifier, mirred action, IFB device)',
    fix: 'load the kernel modules: modprobe sch_htb cls_u32 act_mirred ifb',
  },
  quota: {
    what: 'nf_tables with quota objects for data caps',
    fix: 'load the kernel modules: modprobe nf_tables nft_quota',
  },
  suspension: {
    what: 'nf_tables for suspending peers',
    fix: 'load the kernel module: modprobe nf_tables',
  },
  names: {
    what: 'nf_tables for keeping peer names',
    fix: 'load the kernel module: modprobe nf_tables',
  },
  expiry: {
    what: 'nf_tables for expiring peers',
    fix: 'load the kernel module: modprobe nf_tables',
  },
};

export class FacilityMissingError extends UnavailableError {
  readonly facility: Facility;
  /** `message` when given is complete; otherwise it is made from the facility and `detail`. */
  constructor(facility: Facility, detail: string, message?: string) {
    const help = FACILITY_HELP[facility];
    super('FACILITY_MISSING', message ?? `The kernel lacks ${help.what} (${detail}); ${help.fix}`);
    this.facility = facility;
  }
}

/** A kernel request failed for another reason: 500, carrying the kernel's own words. */
export class KernelFailureError extends DomainError {
  readonly category = 'internal';
  readonly operation: string;
  readonly errnoCode: string;
  /** `remedy`: what the kernel layer says the operator can do (KernelCallError.remedy). */
  constructor(
    operation: string,
    errnoCode: string,
    kernelMessage: string | undefined,
    remedy?: string,
  ) {
    const hint = remedy ? `; ${remedy}` : '';
    super(
      'KERNEL_ERROR',
      `The kernel refused ${operation}: ${kernelMessage ? `${kernelMessage} ` : ''}(${errnoCode})${hint}`,
    );
    this.operation = operation;
    this.errnoCode = errnoCode;
  }
}

/**
 * Turns a typed kernel error into a domain error; anything else (a bug, a protocol error) is
 * returned unchanged. `facility` only says which kind of FacilityMissing it is; `ifname` names
 * the managed interface, the only one the service asks the kernel about.
 */
export function translateKernelError(error: unknown, facility: Facility, ifname: string): unknown {
  if (error instanceof DomainError) return error;
  if (error instanceof kernel.InterfaceMissingError) return new InterfaceMissingError(ifname);
  if (error instanceof kernel.NotWireGuardError) {
    return new InterfaceNotWireGuardError(ifname, error.kind);
  }
  if (error instanceof kernel.FacilityUnavailableError) {
    // The kernel layer already says what is missing and how to fix it.
    return new FacilityMissingError(facility, error.facility, error.message);
  }
  if (error instanceof kernel.SetupConflictError) return new HostSetupConflictError(error.message);
  if (error instanceof kernel.KernelCallError) {
    return new KernelFailureError(error.operation, error.code, error.kernelMessage, error.remedy);
  }
  return error;
}

/** "No such facility here" answers that mean "nothing of that kind exists" when only reading. */
export function isFacilityAbsent(error: unknown): boolean {
  return error instanceof FacilityMissingError;
}

/** An error's own words (its message, or the value itself). */
function reasonOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** The peer is gone from the interface, but its limit or cap could not be removed: 500. */
export class CleanupFailedError extends DomainError {
  readonly category = 'internal';
  constructor(cause: unknown) {
    const reason = reasonOf(cause);
    super(
      'PEER_CLEANUP_FAILED',
      `The peer was removed, but removing its speed limit or data cap failed (${reason}); ` +
        'what is left is removed before its address is given to a new peer',
    );
  }
}

/**
 * A change could not be made durable in the state directory (a full disk, an I/O error): 507.
 * Nothing of it was left in the kernel (the record is written before the kernel change, or the
 * kernel change was undone).
 */
export class StateWriteError extends DomainError {
  readonly category = 'storage';
  constructor(cause: unknown, undone: string) {
    const reason = reasonOf(cause);
    super(
      'STATE_WRITE_FAILED',
      `The change could not be saved in the state directory (${reason}); ${undone}. ` +
        remedyOf(cause),
    );
  }
}

/**
 * 507: the change's record was written but not confirmed on disk, and could not be cut back out
 * of the journal either, so a restart could still apply it. The kernel was not changed. The
 * journal rewrites itself from memory (without the change) before its next write.
 */
export class StateWriteUncertainError extends DomainError {
  readonly category = 'storage';
  constructor(cause: unknown) {
    const reason = reasonOf(cause);
    super(
      'STATE_WRITE_UNCERTAIN',
      `The change could not be saved in the state directory, nor cut back out of it (${reason}); ` +
        'the kernel was not changed, but until the state directory is rewritten (before its next ' +
        'write) a restart could apply the change. Check the disk (dmesg), then repeat the request, ' +
        'or undo it',
    );
  }
}

/**
 * What to do about a state directory write that failed: a full disk wants space; a read-only or
 * broken journal's own message says what to do; anything else is the disk's (EIO).
 */
function remedyOf(cause: unknown): string {
  const code = (cause as NodeJS.ErrnoException | undefined)?.code;
  if (code === 'ENOSPC' || code === 'EDQUOT')
    return 'Free space on its file system, then try again';
  if (cause instanceof StateReadOnlyError || cause instanceof JournalBrokenError) {
    return 'Then try again';
  }
  return 'Check the disk (dmesg), then try again';
}

/**
 * The kernel refused a change whose record was already on disk, and the record undoing it could
 * not be written either (507): the journal puts the peer back in memory and rewrites itself from
 * memory before its next write; until that is on disk, a reboot could bring the refused change
 * back. Not a plain refusal: the client is told the disk is failing.
 */
export class StateUndoFailedError extends DomainError {
  readonly category = 'storage';
  constructor(refused: unknown, cause: unknown) {
    super(
      'STATE_UNDO_FAILED',
      `The kernel refused the change (${reasonOf(refused)}), and saving its undoing in the state ` +
        `directory failed (${reasonOf(cause)}); the state directory is rewritten before its next ` +
        'write, and until then a reboot could bring the refused change back. Check the disk ' +
        '(dmesg), then repeat the request',
    );
  }
}

/** The daemon is putting the saved state back into the kernel (start with --state-dir): 503. */
export class RestoringError extends UnavailableError {
  constructor(ifname: string) {
    super(
      'RESTORING',
      `wg-peerd is restoring the saved peers, limits and caps of ${ifname} into the kernel; ` +
        'retry in a moment',
    );
  }
}
