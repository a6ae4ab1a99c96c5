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

/** The client network namespace. */
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

/** Runs `cmd` through /bin/sh and returns its stdout. Throws with the command, status and stderr. */
export function sh(cmd: string, options: { input?: string } = {}): string {
  try {
    return execFileSync('/bin/sh', ['-c', cmd], {
      encoding: 'utf8',
      input: options.input ?? '',
      stdio: ['pipe', 'pipe', 'pipe'],
      maxBuffer: 256 * 1024 * 1024,
    });
  } catch (err) {
    const e = err as { status?: number | null; signal?: string | null; stderr?: string };
    const how = e.signal ? `signal ${e.signal}` : `status ${String(e.status)}`;
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

/** The interface line of `wg show <if> dump`. */
export interface WgDumpInterface {
  privateKey: string | null;
  publicKey: string | null;
  listenPort: number;
  /** 0 when off. */
  fwmark: number;
}

/** A peer line of `wg show <if> dump`. Shaped like WireGuardPeer of src/kernel/types.ts. */
export interface WgDumpPeer {
  publicKey: string;
  presharedKey: string | null;
  /** "203.0.113.7:51820" or "[2001:db8::1]:51820"; null when unknown. */
  endpoint: string | null;
  /** As wg prints them, e.g. ["10.8.0.2/32"]; empty when none. */
  allowedIps: string[];
  /** null when there never was a handshake. */
  lastHandshake: Date | null;
  /** Unix seconds of the last handshake; 0 when there never was one. */
  lastHandshakeSeconds: number;
  rxBytes: number;
  txBytes: number;
  /** Seconds; 0 when off. */
  persistentKeepalive: number;
}

export interface WgDump {
  interface: WgDumpInterface;
  peers: WgDumpPeer[];
}

const none = (field: string): string | null => (field === '(none)' ? null : field);
const num = (field: string, what: string): number => {
  if (!/^\d+$/.test(field)) throw new Error(`wg show dump: bad ${what} ${JSON.stringify(field)}`);
  return Number(field);
};

/** Parses the output of `wg show <if> dump` (one interface, so no leading interface column). */
export function parseWgDump(text: string): WgDump {
  const lines = text.split('\n').filter((l) => l.length > 0);
  const head = lines.shift();
  if (head === undefined) throw new Error('wg show dump: empty output');
  const i = head.split('\t');
  if (i.length !== 4) throw new Error(`wg show dump: bad interface line ${JSON.stringify(head)}`);
  const iface: WgDumpInterface = {
    privateKey: none(i[0]),
    publicKey: none(i[1]),
    listenPort: num(i[2], 'listen port'),
    fwmark: i[3] === 'off' ? 0 : num(i[3], 'fwmark'),
  };
  const peers = lines.map((line): WgDumpPeer => {
    const f = line.split('\t');
    if (f.length !== 8) throw new Error(`wg show dump: bad peer line ${JSON.stringify(line)}`);
    const seconds = num(f[4], 'latest handshake');
    const allowed = none(f[3]);
    return {
      publicKey: f[0],
      presharedKey: none(f[1]),
      endpoint: none(f[2]),
      allowedIps: allowed === null ? [] : allowed.split(','),
      lastHandshake: seconds === 0 ? null : new Date(seconds * 1000),
      lastHandshakeSeconds: seconds,
      rxBytes: num(f[5], 'rx bytes'),
      txBytes: num(f[6], 'tx bytes'),
      persistentKeepalive: f[7] === 'off' ? 0 : num(f[7], 'persistent keepalive'),
    };
  });
  return { interface: iface, peers };
}

/** `wg show <ifname> dump` in `netns` (root namespace by default), parsed. */
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
