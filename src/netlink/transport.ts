/**
 * The boundary between the netlink layer and a datagram socket. The real one is the native
 * addon (native.ts); tests use the replay transport (transcript.ts), and the recording transport
 * wraps a real one to write fixtures. Injecting it is what lets every kernel call be tested
 * without root and without WireGuard.
 */
export type DatagramHandler = (error: Error | null, datagram?: Buffer) => void;

export interface Transport {
  /** NETLINK_ROUTE, NETLINK_GENERIC or NETLINK_NETFILTER. */
  readonly protocol: number;
  /** The port id the kernel bound us to; replies carry it in nlmsg_pid. */
  readonly portId: number;
  send(datagram: Buffer): void;
  /** Installs the single receiver of datagrams and socket errors (such as ENOBUFS). */
  receive(handler: DatagramHandler): void;
  /** Whether a pending reply should keep the process alive. */
  setBusy(busy: boolean): void;
  /** Joins a multicast group of the protocol (NETLINK_ADD_MEMBERSHIP); absent: cannot. */
  joinGroup?(group: number): void;
  close(): void;
}
