/**
 * Helpers for the kernel tests, which run as root inside the test VM (`npm run test:kernel`).
 *
 * Topology: the guest's ROOT network namespace is the server side (the daemon's netlink sockets
 * live there); the network namespace `wgcli` is the client. A veth pair joins them:
 *
 *   root ns: veth-srv 10.99.0.1/24  <-->  netns wgcli: veth-cli 10.99.0.2/24
 *
 * These helpers may use ip, wg, tc and nft: they are the independent oracles the tests compare the
 * netlink client against, and the client side of the tunnel. Nothing here is used by src/.
 */
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { quotaTableName } from '../../../src/kernel/quota/naming';
import { ifbNameFor } from '../../../src/kernel/shaper/addressing';
import { suspensionTableName } from '../../../src/kernel/suspension';
import { namesTableName } from '../../../src/kernel/names';
import { expiryTableName } from '../../../src/kernel/expiry';
import { type WgDump, parseWgDump } from '../../support/wg-dump';

/** The client network namespace. */
/**
 * Whether this kernel holds a quota's exhaustion notice (NFT_MSG_NEWOBJ) until the next nf_tables
 * commit: 6.12 does; 6.1 sends it with the packet that exhausts the quota.
 */
export const HOLDS_QUOTA_NOTICE = !os.release().startsWith('6.1.');
/**
 * How soon after a cap's cut the daemon must know of it (exhausted_at, peer.cap_exhausted's at).
 * 6.1: the kernel's notice, 1 s. 6.12 holds the notice, so the first shared read that finds the
 * cap used up tells: within one read interval (250 ms in those tests) and one read of the cut,
 * 0.64-1.37 s in the VM with both kernels' suites side by side, so 2 s.
 */
export const CUT_KNOWN_WITHIN_MS = HOLDS_QUOTA_NOTICE ? 2_000 : 1_000;

export const CLIENT_NS = 'wgcli';
/** veth end in the root namespace, and its address. */
export const SERVER_VETH = 'veth-srv';
export const SERVER_UNDERLAY_IP = '10.99.0.1';
/** veth end in the client namespace, and its address. */
export const CLIENT_VETH = 'veth-cli';
export const CLIENT_UNDERLAY_IP = '10.99.0.2';

/** True inside the test VM: scripts/vm/run.sh sets WG_PEERD_VM=1 for the guest command. */
export function inTestVm(): boolean {
  return process.env.WG_PEERD_VM === '1';
}

/**
 * Throws unless running inside the test VM. Call it in a top-level `before` of every kernel test
 * file: the tests change the network configuration of the machine they run on, and need root and
 * a kernel with WireGuard.
 */
export function assertInTestVm(): void {
  if (!inTestVm()) {
    throw new Error(
      'kernel tests must run inside the test VM as root: run `npm run test:kernel` ' +
        '(WG_PEERD_VM=1 is not set, so this is not the VM)',
    );
  }
}

/**
 * How long one command of sh() may run. The slowest oracle commands take seconds; one that runs
 * for minutes hangs. Waiting for it synchronously blocks the event loop, so mocha's own timeout
 * never fires and only the VM's own timeout would end the run, with nothing saying which command.
 */
const SH_TIMEOUT_MS = 240_000;

/** Runs `cmd` through /bin/sh and returns its stdout. Throws with the command, status and stderr. */
export function sh(cmd: string, options: { input?: string } = {}): string {
  try {
    return execFileSync('/bin/sh', ['-c', cmd], {
      encoding: 'utf8',
      input: options.input ?? '',
      stdio: ['pipe', 'pipe', 'pipe'],
      maxBuffer: 256 * 1024 * 1024,
      timeout: SH_TIMEOUT_MS,
      killSignal: 'SIGKILL',
    });
  } catch (err) {
    const e = err as {
      status?: number | null;
      signal?: string | null;
      stderr?: string;
      code?: string;
    };
    const how =
      e.code === 'ETIMEDOUT'
        ? `no end within ${SH_TIMEOUT_MS / 1000} s (killed)`
        : e.signal
          ? `signal ${e.signal}`
          : `status ${String(e.status)}`;
    const stderr = (e.stderr ?? '').trim();
    throw new Error(`\`${cmd}\` failed with ${how}${stderr ? `: ${stderr}` : ''}`);
  }
}

/** Like sh(), but returns false instead of throwing. */
export function trySh(cmd: string): boolean {
  try {
    sh(cmd);
    return true;
  } catch {
    return false;
  }
}

/** Quotes one argument for /bin/sh. */
export function q(arg: string): string {
  return `'${arg.replace(/'/g, `'\\''`)}'`;
}

/** Prefix that runs a command in `netns`, or in the root namespace when netns is undefined. */
export function inNs(netns: string | undefined, cmd: string): string {
  return netns === undefined ? cmd : `ip netns exec ${q(netns)} ${cmd}`;
}

/** True when network namespace `name` exists. */
export function netnsExists(name: string): boolean {
  return fs.existsSync(path.join('/run/netns', name));
}

/** True when link `ifname` exists in `netns` (root namespace by default). */
export function linkExists(ifname: string, netns?: string): boolean {
  return trySh(inNs(netns, `ip link show dev ${q(ifname)} >/dev/null 2>&1`));
}

/** Deletes link `ifname` in `netns` if it exists. */
export function deleteLink(ifname: string, netns?: string): void {
  if (linkExists(ifname, netns)) sh(inNs(netns, `ip link del dev ${q(ifname)}`));
}

/** Deletes nf_tables table `name` of `family` if it exists. */
export function deleteNftTable(family: 'ip' | 'ip6' | 'inet', name: string): void {
  sh(`nft delete table ${family} ${q(name)} 2>/dev/null || true`);
}

/**
 * Removes what a daemon for `ifname` leaves in the kernel, also by design (limits and caps
 * outlive it, to survive a restart): the interface, the shaper's IFB, the quota and suspension
 * tables, named
 * as the daemon names them. For a test file's `before` (what an earlier run left) and `after`,
 * so that later files find the kernel as the VM booted (the table's rules would also keep the
 * nf_tables modules in use). Idempotent.
 */
export function removeDaemonLeftovers(ifname: string): void {
  deleteLink(ifname);
  deleteLink(ifbNameFor(ifname));
  deleteNftTable('ip', quotaTableName(ifname));
  deleteNftTable('inet', quotaTableName(ifname)); // a dual-stack interface's caps (issue 18)
  deleteNftTable('ip', suspensionTableName(ifname));
  deleteNftTable('ip6', suspensionTableName(ifname)); // its peers' suspended IPv6 addresses
  deleteNftTable('ip', namesTableName(ifname)); // its peers' names (issue 31)
  deleteNftTable('ip', expiryTableName(ifname)); // its peers' expiries (issue 31)
  deleteNftTable('ip6', expiryTableName(ifname));
}

/**
 * Creates the client namespace `wgcli` and the veth pair to it, from scratch: whatever an earlier
 * run left behind is torn down first. Returns when both ends are up and reachable.
 */
export function setupClientNamespace(): void {
  teardownClientNamespace();
  sh(`ip netns add ${CLIENT_NS}`);
  sh(inNs(CLIENT_NS, 'ip link set lo up'));
  sh(`ip link add ${SERVER_VETH} type veth peer name ${CLIENT_VETH} netns ${CLIENT_NS}`);
  sh(`ip addr add ${SERVER_UNDERLAY_IP}/24 dev ${SERVER_VETH}`);
  sh(`ip link set ${SERVER_VETH} up`);
  sh(inNs(CLIENT_NS, `ip addr add ${CLIENT_UNDERLAY_IP}/24 dev ${CLIENT_VETH}`));
  sh(inNs(CLIENT_NS, `ip link set ${CLIENT_VETH} up`));
}

/** Removes the client namespace (and with it both veth ends). Idempotent. */
export function teardownClientNamespace(): void {
  if (netnsExists(CLIENT_NS)) sh(`ip netns del ${CLIENT_NS}`);
  // Deleting the namespace destroys veth-cli and so its peer; a half-made pair may remain.
  deleteLink(SERVER_VETH);
}

export interface KeyFile {
  /** A 0600 file holding the base64 private key (what `wg set ... private-key` wants). */
  path: string;
  privateKey: string;
  publicKey: string;
}

/** Generates a key pair with `wg genkey`; the private key goes into a fresh 0600 file under /tmp. */
export function genKeyFile(dir: string = os.tmpdir()): KeyFile {
  const privateKey = sh('wg genkey').trim();
  const publicKey = sh('wg pubkey', { input: `${privateKey}\n` }).trim();
  const file = path.join(fs.mkdtempSync(path.join(dir, 'wgkey-')), 'private.key');
  fs.writeFileSync(file, `${privateKey}\n`, { mode: 0o600 });
  return { path: file, privateKey, publicKey };
}

export interface WgInterfaceOptions {
  name: string;
  /** Network namespace; the root namespace when absent. */
  netns?: string;
  /** Tunnel address with prefix, e.g. "10.8.0.1/24". */
  address: string;
  listenPort?: number;
  /** Key to use; a fresh one when absent. */
  key?: KeyFile;
}

export interface WgInterface {
  name: string;
  netns: string | undefined;
  address: string;
  listenPort: number | undefined;
  key: KeyFile;
}

/**
 * Creates a WireGuard interface with ip/wg only (replacing one of the same name), gives it a key,
 * optionally a listen port, the tunnel address, and sets it up.
 */
export function createWgInterface(options: WgInterfaceOptions): WgInterface {
  const { name, netns, address, listenPort } = options;
  const key = options.key ?? genKeyFile();
  deleteLink(name, netns);
  sh(inNs(netns, `ip link add dev ${q(name)} type wireguard`));
  const port = listenPort === undefined ? '' : ` listen-port ${listenPort}`;
  sh(inNs(netns, `wg set ${q(name)} private-key ${q(key.path)}${port}`));
  sh(inNs(netns, `ip addr add ${q(address)} dev ${q(name)}`));
  sh(inNs(netns, `ip link set ${q(name)} up`));
  return { name, netns, address, listenPort, key };
}

export interface WgPeerOptions {
  publicKey: string;
  /** e.g. ["10.8.0.2/32"]. */
  allowedIps: string[];
  /** "host:port". */
  endpoint?: string;
  /** Seconds. */
  persistentKeepalive?: number;
  /** A 0600 file holding a base64 preshared key. */
  presharedKeyFile?: string;
}

/** Adds (or updates) a peer of `ifname` with `wg set`. */
export function addWgPeer(ifname: string, netns: string | undefined, peer: WgPeerOptions): void {
  let cmd = `wg set ${q(ifname)} peer ${q(peer.publicKey)}`;
  cmd += ` allowed-ips ${q(peer.allowedIps.join(','))}`;
  if (peer.endpoint !== undefined) cmd += ` endpoint ${q(peer.endpoint)}`;
  if (peer.persistentKeepalive !== undefined) {
    cmd += ` persistent-keepalive ${peer.persistentKeepalive}`;
  }
  if (peer.presharedKeyFile !== undefined) cmd += ` preshared-key ${q(peer.presharedKeyFile)}`;
  sh(inNs(netns, cmd));
}

/** `wg show <ifname> dump` in `netns` (root namespace by default), parsed (test/support/wg-dump.ts). */
export function wgShowDump(ifname: string, netns?: string): WgDump {
  return parseWgDump(sh(inNs(netns, `wg show ${q(ifname)} dump`)));
}

/**
 * Pings `address` from `netns` (root namespace when undefined) with busybox ping (the host has no
 * ping binary). Throws when no reply came within `timeoutSeconds`.
 */
export function ping(netns: string | undefined, address: string, timeoutSeconds = 10): void {
  sh(inNs(netns, `busybox ping -c 1 -w ${timeoutSeconds} -q ${q(address)}`));
}

export interface TunnelOptions {
  serverIf: string;
  clientIf: string;
  /** The server's tunnel address; the interface gets it as a /24. */
  serverIp: string;
  /** The client's tunnel address, its /32 the server's allowed IP for it. */
  peerIp: string;
  listenPort: number;
}

/**
 * A working tunnel: the server interface in the root namespace, the client in CLIENT_NS (which
 * must exist), each the other's peer, checked with a ping through it.
 */
export function setupTunnel(options: TunnelOptions): { server: WgInterface; client: WgInterface } {
  const { serverIf, clientIf, serverIp, peerIp, listenPort } = options;
  const server = createWgInterface({ name: serverIf, address: `${serverIp}/24`, listenPort });
  const client = createWgInterface({ name: clientIf, netns: CLIENT_NS, address: `${peerIp}/24` });
  addWgPeer(serverIf, undefined, { publicKey: client.key.publicKey, allowedIps: [`${peerIp}/32`] });
  addWgPeer(clientIf, CLIENT_NS, {
    publicKey: server.key.publicKey,
    allowedIps: [`${serverIp}/32`],
    endpoint: `${SERVER_UNDERLAY_IP}:${listenPort}`,
  });
  ping(CLIENT_NS, serverIp);
  return { server, client };
}
