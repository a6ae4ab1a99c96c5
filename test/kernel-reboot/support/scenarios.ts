/**
 * The two reboot scenarios (issue 16, "Done when" 1 and 2), what boot 1 leaves for boot 2 in the
 * `out` export of scripts/vm/run.sh (the one directory that outlives the VM: test-reboot.sh
 * gives both boots the same one), and the kernel oracles both boots read: `wg show dump`,
 * `ip -j addr`, `tc class show` and `nft -j`.
 *
 * Per scenario, under $OUT_DIR/reboot-<name>/:
 *   state/          the daemon's --state-dir (the daemon makes it, mode 0700)
 *   clients/*.conf  the client configs exactly as boot 1's create responses handed them out
 *   boot1.json      what boot 1 did and what the kernel held when boot 1 ended (Boot1Record)
 */
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { type DaemonProcess, api, startDaemon } from '../../kernel/support/daemon';
import { deleteLink, sh, wgShowDump } from '../../kernel/support/topology';
import { ENDPOINT_HOST } from './clients';

export interface Scenario {
  /** How boot 1's daemon ends: a clean stop (systemd at reboot) or a crash. */
  stop: 'SIGTERM' | 'SIGKILL';
  name: string;
  ifname: string;
  /** The server's tunnel address and prefix (--address). */
  address: string;
  serverIp: string;
  listenPort: number;
  /** The API's host:port. */
  listen: string;
  /** --usage-save-interval. */
  saveIntervalS: number;
  /** TCP port of the transfers through this scenario's tunnels. */
  tcpPort: number;
}

export const SCENARIOS: readonly Scenario[] = [
  {
    stop: 'SIGTERM',
    name: 'sigterm',
    ifname: 'wgrt0',
    address: '10.81.0.1/24',
    serverIp: '10.81.0.1',
    listenPort: 51861,
    listen: '127.0.0.1:18161',
    // The longest interval there is: usage can only come back exact if SIGTERM saved it.
    saveIntervalS: 3600,
    tcpPort: 5461,
  },
  {
    stop: 'SIGKILL',
    name: 'sigkill',
    ifname: 'wgrk0',
    address: '10.82.0.1/24',
    serverIp: '10.82.0.1',
    listenPort: 51862,
    listen: '127.0.0.1:18162',
    saveIntervalS: 3,
    tcpPort: 5462,
  },
];

/** The peers each scenario makes, by role, with what boot 1 sets on them. */
export const LIMITED_RATE = 200_000;
export const CAP = 2_000_000;
export const BOTH = { rate: 300_000, cap: 5_000_000 };
/** SIGKILL scenario: made, limited and capped just before the crash (a 2xx is on disk). */
export const LAST = { rate: 150_000, cap: 3_000_000 };

function outDir(): string {
  const out = process.env.OUT_DIR;
  if (!out) throw new Error('OUT_DIR is not set: run these tests with scripts/vm/test-reboot.sh');
  return out;
}

export function scenarioDir(scenario: Scenario): string {
  return path.join(outDir(), `reboot-${scenario.name}`);
}
export const stateDir = (s: Scenario): string => path.join(scenarioDir(s), 'state');
export const clientsDir = (s: Scenario): string => path.join(scenarioDir(s), 'clients');
const recordFile = (s: Scenario): string => path.join(scenarioDir(s), 'boot1.json');

export function daemonArgs(scenario: Scenario): string[] {
  return [
    '--interface',
    scenario.ifname,
    '--address',
    scenario.address,
    '--listen-port',
    String(scenario.listenPort),
    '--listen',
    scenario.listen,
    '--endpoint-host',
    ENDPOINT_HOST,
    '--list-max-age',
    '0',
    '--state-dir',
    stateDir(scenario),
    '--usage-save-interval',
    String(scenario.saveIntervalS),
  ];
}

/**
 * The daemon as its unit starts it (node dist/src/main.js; `env` in front only so the test
 * helper starts node without npm, which costs 20-40 s per start in the VM).
 */
export function startScenarioDaemon(scenario: Scenario): Promise<DaemonProcess> {
  return startDaemon({ args: daemonArgs(scenario), listen: scenario.listen, prefix: ['env'] });
}

export function bootId(): string {
  return fs.readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
}

/** Bits per second of a tc rate as iproute2 prints it ("80Kbit", "1500Kbit", "8Mbit"). */
function parseRate(text: string): number {
  const match = /^(\d+)([KMGT]?)(i?)bit$/.exec(text);
  if (!match) throw new Error(`unreadable tc rate ${text}`);
  const kilo = match[3] ? 1024 : 1000;
  return Number(match[1]) * kilo ** ' KMGT'.indexOf(match[2] || ' ');
}

/**
 * HTB classes of a device: class id → rate in bytes per second (iproute2 6.1 prints classes as
 * text even with -j). Empty when the device does not exist.
 */
function tcClasses(dev: string): Record<string, number> {
  const classes: Record<string, number> = {};
  for (const line of sh(`tc class show dev ${dev} 2>/dev/null || true`).split('\n')) {
    const match = /^class htb (\S+) .*\brate (\S+)/.exec(line);
    if (match) classes[match[1]] = parseRate(match[2]) / 8;
  }
  return classes;
}

export interface NftQuota {
  bytes: number;
  used: number;
}

/** What the kernel holds for one scenario's interface, as the tools show it. */
export interface KernelPicture {
  publicKey: string;
  listenPort: number;
  /** "address/prefix" of the interface's IPv4 addresses. */
  addresses: string[];
  /** Sorted by public key. */
  peers: Array<{ publicKey: string; allowedIps: string[] }>;
  /** HTB classes on the interface (downloads) and on its IFB (uploads). */
  classes: { dev: Record<string, number>; ifb: Record<string, number> };
  /** Quota objects of the daemon's nf_tables table, by name. */
  quotas: Record<string, NftQuota>;
  /** The table's maps, name → elements as nft -j gives them (JSON texts, sorted). */
  maps: Record<string, string[]>;
}

interface NftEntry {
  quota?: { name: string; bytes: number; used?: number };
  map?: { name: string; elem?: unknown[] };
}

/** `nft -j list table ip wg_peerd_<if>`: quotas and maps, empty when there is no table. */
export function nftPicture(ifname: string): Pick<KernelPicture, 'quotas' | 'maps'> {
  const table = `wg_peerd_${ifname}`;
  const picture: Pick<KernelPicture, 'quotas' | 'maps'> = { quotas: {}, maps: {} };
  if (!sh('nft list tables ip').includes(table)) return picture;
  const entries = (JSON.parse(sh(`nft -j list table ip ${table}`)) as { nftables: NftEntry[] })
    .nftables;
  for (const { quota, map } of entries) {
    if (quota) picture.quotas[quota.name] = { bytes: quota.bytes, used: quota.used ?? 0 };
    if (map) picture.maps[map.name] = (map.elem ?? []).map((e) => JSON.stringify(e)).sort();
  }
  return picture;
}

export function kernelPicture(scenario: Scenario): KernelPicture {
  const dump = wgShowDump(scenario.ifname);
  const [link] = JSON.parse(sh(`ip -j -4 addr show dev ${scenario.ifname}`)) as Array<{
    addr_info: Array<{ local: string; prefixlen: number }>;
  }>;
  return {
    publicKey: dump.device.publicKey,
    listenPort: dump.device.listenPort,
    addresses: link.addr_info.map((a) => `${a.local}/${a.prefixlen}`).sort(),
    peers: dump.peers
      .map((p) => ({ publicKey: p.publicKey, allowedIps: [...p.allowedIps].sort() }))
      .sort((a, b) => a.publicKey.localeCompare(b.publicKey)),
    classes: { dev: tcClasses(scenario.ifname), ifb: tcClasses(`ifb-${scenario.ifname}`) },
    ...nftPicture(scenario.ifname),
  };
}

/** nf_tables' name of the quota object of a tunnel address (README "How it is built"). */
export function quotaName(address: string): string {
  return `q_${address.replace(/\./g, '_')}`;
}

/** A peer as the API lists it: the fields the reboot must keep. */
export interface ListedPeer {
  public_key: string;
  ip_address: string;
  allowed_ips: string[];
  speed_limit_bytes_per_second: number | null;
  data_cap: { quota_bytes: number; used_bytes: number; enforced: boolean } | null;
  /** The peer's name (issue 31); null without one. */
  name: string | null;
  /** Its expiry (issue 31), ISO 8601 UTC; null without one. */
  expires_at: string | null;
  expired: boolean;
}

/** The expiry boot 1 gives the limited peer, and boot 2 finds back (issue 31). */
export const LIMITED_EXPIRES_AT = '2031-01-01T00:00:00.000Z';

export async function listPeers(daemon: DaemonProcess): Promise<ListedPeer[]> {
  const reply = await api(daemon, 'GET', '/api/peers');
  if (reply.status !== 200) throw new Error(`GET /api/peers: ${reply.status}`);
  return (reply.body.peers as ListedPeer[]).sort((a, b) =>
    a.public_key.localeCompare(b.public_key),
  );
}

export interface CreatedPeer {
  ip: string;
  publicKey: string;
  serverPublicKey: string;
  endpoint: string;
  /** The wg-quick config handed to the client. */
  config: string;
}

export interface Boot1Record {
  bootId: string;
  /** Role → the create response (private keys only in the client config files). */
  peers: Record<string, Omit<CreatedPeer, 'config'>>;
  /** Public keys deleted through the API: they must stay deleted. */
  deleted: string[];
  /** The API's list just before the daemon was stopped. */
  listed: ListedPeer[];
  /** The kernel once the daemon was gone and the clients down: what boot 2 must find. */
  kernel: KernelPicture;
  /** Role → sha256 of the client config file kept in clients/ (the create response's text). */
  configHashes: Record<string, string>;
  /** SIGKILL: the capped peer's usage once a checkpoint had saved it, and at the crash. */
  usage?: { checkpointed: number; atCrash: number; checkpointAgeAtCrashS: number };
}

export function writeRecord(scenario: Scenario, record: Boot1Record): void {
  fs.writeFileSync(recordFile(scenario), `${JSON.stringify(record, null, 2)}\n`);
}

export function readRecord(scenario: Scenario): Boot1Record {
  const file = recordFile(scenario);
  if (!fs.existsSync(file)) {
    throw new Error(`${file} is missing: boot 1 of the ${scenario.name} scenario did not finish`);
  }
  return JSON.parse(fs.readFileSync(file, 'utf8')) as Boot1Record;
}

/** Starts a scenario from nothing (boot 1): no state dir, no interface, no table. */
export function resetScenario(scenario: Scenario): void {
  fs.rmSync(scenarioDir(scenario), { recursive: true, force: true });
  fs.mkdirSync(clientsDir(scenario), { recursive: true });
  cleanKernel(scenario);
}

export function cleanKernel(scenario: Scenario): void {
  deleteLink(scenario.ifname);
  deleteLink(`ifb-${scenario.ifname}`);
  sh(`nft delete table ip wg_peerd_${scenario.ifname} 2>/dev/null || true`);
}

/** The value of a metric without labels from GET /metrics text, or null when absent. */
export function metric(text: string, name: string): number | null {
  const line = text.split('\n').find((l) => l.startsWith(`${name} `));
  return line === undefined ? null : Number(line.slice(name.length + 1));
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** The bytes a cap has counted once they stopped moving (2 s without change, 60 s at most). */
export async function settledUsage(ifname: string, address: string): Promise<number> {
  let last = -1;
  for (let i = 0; i < 30; i++) {
    const used = nftPicture(ifname).quotas[quotaName(address)]?.used ?? -1;
    if (used === last) return used;
    last = used;
    await sleep(2000);
  }
  throw new Error(`the cap of ${address} was still counting after 60 s (${last})`);
}

export function sha256(text: string): string {
  return createHash('sha256').update(text).digest('hex');
}
