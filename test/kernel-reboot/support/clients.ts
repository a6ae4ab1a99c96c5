/**
 * The client side of the reboot tests: real WireGuard clients, each in a network namespace of
 * its own, brought up with `wg-quick up` from the config the daemon's create response handed
 * out (as a client operator would), and TCP through their tunnels.
 *
 *   root ns (server)                               netns wgrc<N> (client N)
 *   rbt-ep 10.60.255.1/32 (the endpoint host)
 *   vrs<N> 10.60.<N>.1/24   <---- veth ---->       vrc<N> 10.60.<N>.2/24, route to 10.60.255.1
 *
 * Two clients need two namespaces: each routes the server's whole subnet through its tunnel
 * (the config's AllowedIPs), which one namespace could do for only one of them.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import {
  deleteLink,
  inNs,
  linkExists,
  netnsExists,
  q,
  sh,
  trySh,
} from '../../kernel/support/topology';
import { receive } from '../../support/receiver';

/** The address every client config names as the server's endpoint host (--endpoint-host). */
export const ENDPOINT_HOST = '10.60.255.1';
const ENDPOINT_LINK = 'rbt-ep';

export interface Client {
  netns: string;
  /** The client's WireGuard interface, named after its config file. */
  ifname: string;
}

/** The endpoint host's address on a dummy link of the root namespace (idempotent). */
export function setupEndpointHost(): void {
  if (linkExists(ENDPOINT_LINK)) return;
  sh(`ip link add ${ENDPOINT_LINK} type dummy`);
  sh(`ip addr add ${ENDPOINT_HOST}/32 dev ${ENDPOINT_LINK}`);
  sh(`ip link set ${ENDPOINT_LINK} up`);
}

export function teardownEndpointHost(): void {
  deleteLink(ENDPOINT_LINK);
}

/** Namespace wgrc<n> joined to the root namespace by a veth pair, from scratch. */
export function setupClientNamespace(n: number): string {
  const netns = `wgrc${n}`;
  teardownClientNamespace(n);
  sh(`ip netns add ${netns}`);
  sh(inNs(netns, 'ip link set lo up'));
  sh(`ip link add vrs${n} type veth peer name vrc${n} netns ${netns}`);
  sh(`ip addr add 10.60.${n}.1/24 dev vrs${n}`);
  sh(`ip link set vrs${n} up`);
  sh(inNs(netns, `ip addr add 10.60.${n}.2/24 dev vrc${n}`));
  sh(inNs(netns, `ip link set vrc${n} up`));
  sh(inNs(netns, `ip route add ${ENDPOINT_HOST}/32 via 10.60.${n}.1`));
  return netns;
}

export function teardownClientNamespace(n: number): void {
  if (netnsExists(`wgrc${n}`)) sh(`ip netns del wgrc${n}`);
  deleteLink(`vrs${n}`);
}

/**
 * Brings a client up from a wg-quick config file, unchanged, as its operator would: `wg-quick up`
 * in the namespace. The interface is named after the file (`<ifname>.conf`).
 */
export function connectClient(netns: string, file: string): Client {
  const ifname = path.basename(file, '.conf');
  if (linkExists(ifname, netns)) sh(inNs(netns, `ip link del ${q(ifname)}`));
  sh(inNs(netns, `wg-quick up ${q(file)} 2>&1`));
  return { netns, ifname };
}

/** Keeps a client config as `<dir>/<ifname>.conf` (0600: it holds the private key). */
export function saveClientConfig(dir: string, ifname: string, config: string): string {
  const file = path.join(dir, `${ifname}.conf`);
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(file, config, { mode: 0o600 });
  return file;
}

/** The client's latest handshake in Unix seconds (0: never), as `wg show` in its namespace says. */
export function clientHandshake(client: Client): number {
  const line = sh(inNs(client.netns, `wg show ${q(client.ifname)} latest-handshakes`)).trim();
  return Number(line.split('\t')[1] ?? 0);
}

/** True when `address` answers a ping through the client's tunnel within `seconds`. */
export function pings(client: Client, address: string, seconds = 10): boolean {
  return trySh(inNs(client.netns, `busybox ping -c 1 -w ${seconds} -q ${q(address)}`));
}

function node(
  netns: string | undefined,
  script: string,
  args: Array<string | number>,
): ChildProcess {
  const argv = [script, ...args.map(String)];
  return netns === undefined
    ? spawn(process.execPath, argv)
    : spawn('ip', ['netns', 'exec', netns, process.execPath, ...argv]);
}

export type Direction = 'download' | 'upload';

export interface Ends {
  client: Client;
  /** The client's tunnel address. */
  clientIp: string;
  /** The server's tunnel address. */
  serverIp: string;
  port: number;
}

/** Where the receiver of a transfer listens, and which namespace each end runs in. */
function sides(ends: Ends, direction: Direction) {
  const download = direction === 'download';
  return {
    host: download ? ends.clientIp : ends.serverIp,
    receiverNs: download ? ends.client.netns : undefined,
    senderNs: download ? undefined : ends.client.netns,
  };
}

const SIZED = path.join(__dirname, 'sized-transfer.js');
/** Idle time after which a sink counts a transfer as cut off. */
const IDLE_MS = 4000;

/**
 * Sends `bytes` through the tunnel (download: server to client) and returns the payload bytes
 * that arrived: all of them, or what passed before a data cap cut the tunnel.
 */
export async function transfer(ends: Ends, direction: Direction, bytes: number): Promise<number> {
  const { host, receiverNs, senderNs } = sides(ends, direction);
  const receiver = node(receiverNs, SIZED, ['sink', host, ends.port, IDLE_MS]);
  const { bytes: arrived } = await receive<{ bytes: number }>(
    receiver,
    () => node(senderNs, SIZED, ['source', host, ends.port, bytes, 120]),
    'transfer process',
  );
  return arrived;
}

const BULK = path.join(__dirname, '..', '..', 'kernel', 'support', 'shaper-bulk.js');
/** As test/kernel/shaper.test.ts measures a limit: 3 s of warm-up, 6 s measured, 4 streams. */
const WARMUP_MS = 3000;
const MEASURE_MS = 6000;
const STREAMS = 4;

/** Bulk TCP for WARMUP_MS + MEASURE_MS: the payload bytes per second measured at the receiver. */
export async function measureRate(ends: Ends, direction: Direction): Promise<number> {
  const { host, receiverNs, senderNs } = sides(ends, direction);
  const receiver = node(receiverNs, BULK, ['receive', host, ends.port, WARMUP_MS, MEASURE_MS]);
  const seconds = (WARMUP_MS + MEASURE_MS) / 1000 + 10;
  const { bytesPerSecond } = await receive<{ bytesPerSecond: number }>(
    receiver,
    () => node(senderNs, BULK, ['send', host, ends.port, seconds, STREAMS]),
    'transfer process',
  );
  return bytesPerSecond;
}
