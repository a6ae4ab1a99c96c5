/**
 * The C addon (native/netlink.c): an AF_NETLINK socket whose datagrams arrive through uv_poll,
 * and one datagram sent on an AF_UNIX socket (sd_notify's, src/systemd-notify.ts).
 */
import path from 'node:path';
import nodeGypBuild from 'node-gyp-build';
import {
  NETLINK_ADD_MEMBERSHIP,
  NETLINK_CAP_ACK,
  NETLINK_EXT_ACK,
  NETLINK_GET_STRICT_CHK,
  NETLINK_ROUTE,
  SOL_NETLINK,
  SOL_SOCKET,
  SO_RCVBUF,
  SO_RCVBUFFORCE,
  SO_SNDBUF,
  SO_SNDBUFFORCE,
} from './constants';
import type { DatagramHandler, Transport } from './transport';

interface NativeSocket {
  portId(): number;
  setOption(level: number, name: number, value: number): void;
  send(datagram: Buffer): void;
  start(handler: DatagramHandler): void;
  ref(): void;
  unref(): void;
  close(): void;
}

export interface NativeModule {
  Socket: new (protocol: number) => NativeSocket;
  /** One datagram to an AF_UNIX SOCK_DGRAM address: a path, or "@name" (abstract). */
  sendUnixDatagram(address: string, datagram: Buffer): void;
}

let nativeModule: NativeModule | undefined;

/**
 * The command that builds the addon in `root`, wherever that is: a checkout, or a release
 * installed with `npm install -g` (which has no lockfile, so `npm ci` fails there, and whose
 * install script npm 11 may not have run). `npm run install` runs scripts/build-native.sh, which
 * takes a prebuild that loads, else compiles native/ with the node-gyp npm carries.
 */
export function buildCommand(root: string): string {
  // Quoted for the shell when the path holds anything but the usual characters of a path.
  const dir = /^[\w./@+-]+$/.test(root) ? root : `'${root.replace(/'/g, `'\\''`)}'`;
  return `cd ${dir} && npm run install`;
}

const BUILD_TOOLS = 'it needs gcc, make and python3: `apt-get install build-essential python3`';

/**
 * The addon cannot be loaded: none is built and no prebuild fits this machine, or the one
 * node-gyp-build chose does not load here (`file`, with the loader's words as `reason`: a libc
 * older than the one it was built for, a damaged file). Either way the message says the command
 * that builds one for this machine, in the place the package is.
 */
export class NativeAddonMissingError extends Error {
  constructor(
    readonly root: string,
    options?: { cause?: unknown; file?: string; reason?: string },
  ) {
    const what =
      options?.file === undefined
        ? 'the native netlink addon is not built and no prebuilt one fits this machine'
        : `the native netlink addon ${options.file} does not load on this machine (${options.reason ?? 'unknown reason'})`;
    super(`${what}: build it with \`${buildCommand(root)}\` (${BUILD_TOOLS})`, options);
    this.name = 'NativeAddonMissingError';
  }
}

export type RequireFunction = (file: string) => unknown;
/** Where the addon of a package root is: node-gyp-build's `resolve`, or throws when none fits. */
export type ResolveFunction = (root: string) => string;

/**
 * node-gyp-build's choice of addon for `root`: `build/Release/netlink.node` (built here by
 * `npm ci` or by the install script's fallback), else the prebuild of `prebuilds/<platform>-<arch>/`
 * that fits this Node.js and libc (made by `npm pack`, so a release installs without a compiler).
 * "Nothing fits" and a file that does not load both become NativeAddonMissingError, which names
 * the command that builds one (the loader's own words kept in the message and as its cause).
 */
export function loadNativeFrom(
  root: string,
  load: RequireFunction,
  resolve: ResolveFunction = nodeGypBuild.resolve,
): NativeModule {
  let file: string;
  try {
    file = resolve(root);
  } catch (error) {
    // node-gyp-build's own words: "No native build was found for platform=linux arch=x64 ...".
    if (error instanceof Error && error.message.startsWith('No native build was found')) {
      throw new NativeAddonMissingError(root, { cause: error });
    }
    throw error;
  }
  try {
    return load(file) as NativeModule;
  } catch (error) {
    const reason = (error instanceof Error ? error.message : String(error)).split('\n')[0]!;
    throw new NativeAddonMissingError(root, { cause: error, file, reason });
  }
}

function loadNative(): NativeModule {
  // dist/src/netlink/native.js → the package root, which holds build/ and prebuilds/
  nativeModule ??= loadNativeFrom(path.resolve(__dirname, '..', '..', '..'), require);
  return nativeModule;
}

/**
 * Sends one datagram to the AF_UNIX SOCK_DGRAM socket at `address` (a path, or "@name" in the
 * abstract namespace), on a socket of its own that is closed at once; never blocks (EAGAIN when
 * the receiver's queue is full). Throws the errno error (`code`, `errno`, `syscall`).
 */
export function sendUnixDatagram(address: string, datagram: Buffer): void {
  loadNative().sendUnixDatagram(address, datagram);
}

/** Receive buffer size: a 10,000-peer WireGuard dump fits with room. */
const BUFFER_BYTES = 4 * 1024 * 1024;
/**
 * Send buffer size. An nf_tables transaction must be ONE datagram (nfnetlink_rcv_batch runs the
 * batch of one skb), and netlink_sendmsg refuses a datagram longer than sk_sndbuf - 32 with
 * EMSGSIZE (net/netlink/af_netlink.c): a restore of 50,000 caps is one transaction of about
 * 13 MB. A limit, not an allocation: each datagram's skb is allocated at its own size.
 */
const SEND_BUFFER_BYTES = 64 * 1024 * 1024;

export interface NativeTransportOptions {
  /** Receive buffer size in bytes. */
  bufferBytes?: number;
  /** Send buffer size in bytes. */
  sendBufferBytes?: number;
}

export class NativeTransport implements Transport {
  readonly portId: number;
  private readonly socket: NativeSocket;
  private handler: DatagramHandler | undefined;
  private started = false;
  private closed = false;

  constructor(
    readonly protocol: number,
    options: NativeTransportOptions = {},
  ) {
    const { Socket } = loadNative();
    this.socket = new Socket(protocol);
    const bytes = options.bufferBytes ?? BUFFER_BYTES;
    // The *FORCE variants need CAP_NET_ADMIN and bypass rmem_max/wmem_max; without the
    // capability fall back to the capped ones (a bigger buffer only makes ENOBUFS rarer).
    if (!this.trySetOption(SOL_SOCKET, SO_RCVBUFFORCE, bytes)) {
      this.trySetOption(SOL_SOCKET, SO_RCVBUF, bytes);
    }
    const sendBytes = options.sendBufferBytes ?? SEND_BUFFER_BYTES;
    if (!this.trySetOption(SOL_SOCKET, SO_SNDBUFFORCE, sendBytes)) {
      this.trySetOption(SOL_SOCKET, SO_SNDBUF, sendBytes);
    }
    // Extended ACKs carry the kernel's own error text; capped ACKs stop the kernel echoing
    // whole requests (a 1,000-peer SET) back in every ACK. Both exist since 4.12/4.3.
    this.trySetOption(SOL_NETLINK, NETLINK_EXT_ACK, 1);
    this.trySetOption(SOL_NETLINK, NETLINK_CAP_ACK, 1);
    // Strict checking exists for rtnetlink only: it rejects sloppy headers and turns on
    // kernel-side dump filtering (by ifindex for RTM_GETADDR, for example).
    if (protocol === NETLINK_ROUTE) this.trySetOption(SOL_NETLINK, NETLINK_GET_STRICT_CHK, 1);
    this.portId = this.socket.portId();
  }

  private trySetOption(level: number, name: number, value: number): boolean {
    try {
      this.socket.setOption(level, name, value);
      return true;
    } catch {
      return false;
    }
  }

  send(datagram: Buffer): void {
    this.socket.send(datagram);
  }

  receive(handler: DatagramHandler): void {
    this.handler = handler;
    if (!this.started) {
      this.started = true;
      this.socket.start((error, datagram) => this.handler?.(error, datagram));
      this.socket.unref();
    }
  }

  joinGroup(group: number): void {
    this.socket.setOption(SOL_NETLINK, NETLINK_ADD_MEMBERSHIP, group);
  }

  setBusy(busy: boolean): void {
    if (!this.started || this.closed) return;
    if (busy) this.socket.ref();
    else this.socket.unref();
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.socket.close();
  }
}
