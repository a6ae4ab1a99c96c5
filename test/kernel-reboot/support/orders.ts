/**
 * The reboot scenarios of issue 28 ("Done when" 2: every answered change survives, whatever the
 * order of events), run by orders-boot1.test.ts and orders-boot2.test.ts beside issue 16's pair
 * in the same two VM boots (scripts/vm/test-reboot.sh). Each scenario has its own interface,
 * API port and state dir under $OUT_DIR/reboot-<name>/ (scenarios.ts), and every daemon ends with
 * SIGTERM, as systemd stops it at a reboot. What boot 1 leaves for boot 2 is `orders.json`
 * beside the state dir: the boot id, the API's list just before the stop, what the kernel held
 * after it (wg, ip, tc, nft) and the scenario's own facts (a removed key). The oracles are the
 * kernel's tools and the HTTP API; nothing here reads the state dir's files.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { type DaemonProcess, api, startDaemon } from '../../kernel/support/daemon';
import { sh } from '../../kernel/support/topology';
import {
  type KernelPicture,
  type Scenario,
  daemonArgs,
  scenarioDir,
  startScenarioDaemon,
} from './scenarios';

function scenario(name: string, ifname: string, n: number): Scenario {
  return {
    stop: 'SIGTERM',
    name,
    ifname,
    address: `10.9${n}.0.1/24`,
    serverIp: `10.9${n}.0.1`,
    listenPort: 51870 + n,
    listen: `127.0.0.1:${18170 + n}`,
    // Usage is saved at the stop: what boot 2 finds is exact.
    saveIntervalS: 3600,
    tcpPort: 5470 + n,
  };
}

/** (a) The README's order: a first start without a state dir, then the service with one. */
export const ADOPT = scenario('adopt', 'wgad0', 1);
/** (b) Concurrent changes to one peer, on several peers at once. */
export const RACES = scenario('races', 'wgcc0', 2);
/** (c) A peer removed behind the daemon's back (`wg set ... remove`), then a new create. */
export const REMOVED = scenario('removed', 'wgbb0', 3);

/** The daemon as the README's "First start" runs it: no --state-dir, so nothing is saved. */
export function startWithoutStateDir(s: Scenario): Promise<DaemonProcess> {
  const args = daemonArgs(s);
  for (const flag of ['--state-dir', '--usage-save-interval']) {
    const at = args.indexOf(flag);
    args.splice(at, 2);
  }
  return startDaemon({ args, listen: s.listen, prefix: ['env'] });
}

export { startScenarioDaemon as startWithStateDir };

/** A peer as the API lists it: what a reboot must keep. */
export interface Listed {
  public_key: string;
  ip_address: string;
  allowed_ips: string[];
  speed_limit_bytes_per_second: number | null;
  data_cap: { quota_bytes: number; used_bytes: number; enforced: boolean } | null;
  suspended: boolean;
}

/** GET /api/peers, sorted by public key. */
export async function list(daemon: DaemonProcess): Promise<Listed[]> {
  const reply = await api(daemon, 'GET', '/api/peers');
  if (reply.status !== 200) throw new Error(`GET /api/peers: ${reply.status}`);
  return (reply.body.peers as Listed[]).sort((a, b) => a.public_key.localeCompare(b.public_key));
}

/** What a reboot must keep of a listed peer: its address, limit, cap and suspension. */
export function kept(peers: Listed[]): Array<Record<string, unknown>> {
  return peers.map((p) => ({
    key: p.public_key,
    ip: p.ip_address,
    allowed: [...p.allowed_ips].sort(),
    limit: p.speed_limit_bytes_per_second,
    cap:
      p.data_cap === null ? null : { quota: p.data_cap.quota_bytes, used: p.data_cap.used_bytes },
    suspended: p.suspended,
  }));
}

/** POST /api/peer: the new peer's public key and address. */
export async function create(daemon: DaemonProcess): Promise<{ publicKey: string; ip: string }> {
  const reply = await api(daemon, 'POST', '/api/peer');
  if (reply.status !== 201 && reply.status !== 200) {
    throw new Error(`POST /api/peer: ${reply.status} ${JSON.stringify(reply.body)}`);
  }
  const { peer } = reply.body as { peer: { publicKey: string; ip: string } };
  return { publicKey: peer.publicKey, ip: peer.ip };
}

/** The path of a peer's route: `/api/peer/<percent-encoded key><what>`. */
export const peerPath = (publicKey: string, what = ''): string =>
  `/api/peer/${encodeURIComponent(publicKey)}${what}`;

/**
 * The addresses in the interface's suspension set (`nft -j list set ip wg_peerd_suspend_<if>
 * suspended`), sorted; empty when there is no such table.
 */
export function suspendedInKernel(ifname: string): string[] {
  const table = `wg_peerd_suspend_${ifname}`;
  if (!sh('nft list tables ip').includes(table)) return [];
  const { nftables } = JSON.parse(sh(`nft -j list set ip ${table} suspended`)) as {
    nftables: Array<{ set?: { elem?: unknown[] } }>;
  };
  const addresses: string[] = [];
  for (const { set } of nftables) {
    for (const e of set?.elem ?? []) {
      // A plain address, or {"elem": {"val": address, "comment": ...}} when it carries a comment.
      const value = typeof e === 'string' ? e : (e as { elem?: { val?: unknown } }).elem?.val;
      addresses.push(String(value));
    }
  }
  return addresses.sort();
}

/** The daemon's log lines of one event, parsed. */
export function logged(daemon: DaemonProcess, event: string): Array<Record<string, unknown>> {
  return daemon
    .output()
    .split('\n')
    .filter((line) => line.includes(`"event":"${event}"`))
    .map((line) => JSON.parse(line) as Record<string, unknown>);
}

/** What boot 1 leaves for boot 2 of one scenario. */
export interface OrdersRecord {
  bootId: string;
  /** The API's list just before the SIGTERM. */
  listed: Listed[];
  /** The kernel after the daemon ended. */
  kernel: KernelPicture;
  /** The addresses of the suspension set after the daemon ended. */
  suspended: string[];
  /** Public keys that must not come back. */
  gone: string[];
}

const recordFile = (s: Scenario): string => path.join(scenarioDir(s), 'orders.json');

export function writeOrdersRecord(s: Scenario, record: OrdersRecord): void {
  fs.writeFileSync(recordFile(s), `${JSON.stringify(record, null, 2)}\n`);
}

export function readOrdersRecord(s: Scenario): OrdersRecord {
  const file = recordFile(s);
  if (!fs.existsSync(file)) {
    throw new Error(`${file} is missing: boot 1 of the ${s.name} scenario did not finish`);
  }
  return JSON.parse(fs.readFileSync(file, 'utf8')) as OrdersRecord;
}

/** Seconds since `start` (Date.now()), one decimal: each scenario prints what it cost. */
export const secondsSince = (start: number): string => ((Date.now() - start) / 1000).toFixed(1);
