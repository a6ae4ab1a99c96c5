import { constants as osConstants } from 'node:os';

/** errno number → name ("ENODEV"), from Node's own table of the platform's errno values. */
const ERRNO_NAMES: ReadonlyMap<number, string> = new Map(
  Object.entries(osConstants.errno).map(([name, value]) => [value, name]),
);

export function errnoName(errno: number): string {
  return ERRNO_NAMES.get(errno) ?? `E${errno}`;
}

export interface NetlinkErrorInit {
  /** Positive errno, as in errno.h. */
  errno: number;
  /** What was being done, e.g. "WG_CMD_GET_DEVICE wg0" (for people: logs and messages). */
  operation: string;
  /**
   * nlmsg_type of the request the kernel refused, from the socket's record of what it sent
   * under each sequence number (for code: what an errno means depends on the message).
   * Undefined when no one message failed (a socket error during a batch).
   */
  messageType?: number | undefined;
  /** NLMSGERR_ATTR_MSG: the kernel's extended-ACK text, when it sent one. */
  kernelMessage?: string | undefined;
  /** NLMSGERR_ATTR_OFFS: byte offset of the offending attribute in our request. */
  offset?: number | undefined;
  /** Sequence number of the failed request. */
  sequence?: number | undefined;
}

/**
 * A request the kernel answered with a negative NLMSG_ERROR (or a socket-level failure).
 * `message` reads like "WG_CMD_GET_DEVICE wg0: ENODEV (No such device): <kernel text>".
 */
export class NetlinkError extends Error {
  readonly errno: number;
  readonly code: string;
  readonly operation: string;
  readonly messageType: number | undefined;
  readonly kernelMessage: string | undefined;
  readonly offset: number | undefined;
  readonly sequence: number | undefined;

  constructor(init: NetlinkErrorInit) {
    const code = errnoName(init.errno);
    const kernelPart = init.kernelMessage ? `: ${init.kernelMessage}` : '';
    super(`${init.operation}: ${code} (${describeErrno(init.errno)})${kernelPart}`);
    this.name = 'NetlinkError';
    this.errno = init.errno;
    this.code = code;
    this.operation = init.operation;
    this.messageType = init.messageType;
    this.kernelMessage = init.kernelMessage;
    this.offset = init.offset;
    this.sequence = init.sequence;
  }
}

/** A reply the codec could not make sense of: truncated, misaligned, or of the wrong shape. */
export class NetlinkProtocolError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'NetlinkProtocolError';
  }
}

export function isNetlinkError(error: unknown, code?: string): error is NetlinkError {
  return error instanceof NetlinkError && (code === undefined || error.code === code);
}

const DESCRIPTIONS: Readonly<Record<string, string>> = {
  EPERM: 'Operation not permitted',
  ENOENT: 'No such file or directory',
  EINTR: 'Interrupted system call',
  ENOMEM: 'Out of memory',
  EBUSY: 'Device or resource busy',
  EEXIST: 'File exists',
  ENODEV: 'No such device',
  EINVAL: 'Invalid argument',
  ENOSPC: 'No space left on device',
  ERANGE: 'Result out of range',
  EOPNOTSUPP: 'Operation not supported',
  ENOBUFS: 'No buffer space available',
  EAFNOSUPPORT: 'Address family not supported by protocol',
  EPROTONOSUPPORT: 'Protocol not supported',
  EBADR: 'Invalid request descriptor',
  EMSGSIZE: 'Message too long',
  ENOTSUP: 'Operation not supported',
  EADDRNOTAVAIL: 'Cannot assign requested address',
  ETIMEDOUT: 'Timed out',
};

function describeErrno(errno: number): string {
  return DESCRIPTIONS[errnoName(errno)] ?? `errno ${errno}`;
}
