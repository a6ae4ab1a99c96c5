/**
 * `npm run bench:api` (issue 8): GET /api/peers under polling load, side by side, in one VM run
 * (as root, by scripts/vm/bench-api.sh). Not a test and not part of CI: it prints figures.
 *
 * For each size (default 1,000, 10,000 and 50,000 peers: distinct /32s in 10.77.0.0/16 on a
 * WireGuard interface made for the bench, server 10.77.0.1/16, generated keys, added in bulk
 * with the project's own kernel client), three rounds of, alternating:
 *   A   the daemon as `npm start` runs it, `node <npm start's node flags, package.json> dist/src/main.js --interface wgapi0 --listen 127.0.0.1:PORT`
 *   A0  the same with `--list-max-age 0` (skipped, saying so, when --help does not know it)
 *   B   bench/baseline-wg-dump.ts: a BASELINE running `wg show <if> dump` per request
 *   C   bench/replay-ceiling.ts: a transfer ceiling replaying A's own body from memory
 *   R   with BENCH_REFERENCE_DIR=<another built checkout>: that checkout's daemon, run as A (its own
 *       package.json start flags, its own dist/ and node_modules), to compare two versions of the
 *       daemon side by side in one VM run, alternating with A in every round
 *   R2  the same for BENCH_REFERENCE_DIR2: a third version (e.g. before and after a change, and
 *       today's), each pair compared round by round
 * Each is a fresh process; autocannon (8 connections) warms up, then measures; per run it prints
 * req/s, p50, p99, the server's peak RSS (VmHWM of /proc/<pid>/status after the run), its CPU
 * time per request over the measured load (utime + stime of /proc/<pid>/stat: steadier than
 * req/s when the host is loaded, since autocannon's share of the guest's one CPU is not in it)
 * and its first answer's size, then per size the ratios A/B and A/C (A and A0) from the medians
 * of the rounds, and for each pair of versions the per-round ratios and their median.
 *
 * Per size it also prints the raw costs, measured in this process (medians): netlink receive of
 * the WireGuard dump (raw NetlinkSocket dump, no attribute decoding), table decode (parseDevice, the oracle),
 * the dump decoder (src/kernel/wireguard/dump.ts) cold (a dump it has not seen), warm (with the
 * DumpMemo of the previous read of an unchanged device: this bench's peers are idle) and after
 * churn (BENCH_CHURN of the peers changed since the previous read, by changing their allowed IPs),
 * the body build (src/http/list-body) the same three ways (warm twice: written afresh, and as the
 * daemon does it, where an unchanged read answers the last body again), and `wg show dump` as a
 * process. At
 * 10,000 peers: one request alone (A0, one connection) next to receive + decode + build.
 *
 * Capped host (issue 29), BENCH_CAPPED=1: per size the interface is made from nothing by the
 * daemon's own restore of a state dir (bench/capped-population.ts: every peer with a cap that has
 * counted bytes, a tenth with a monthly period, a tenth with a speed limit, 1% suspended, 1%
 * throttling; spawn to its first full list is printed), that daemon is stopped, and the servers
 * start on the existing interface without a state dir (so each daemon's first list after its
 * start is a first list on an existing capped interface, printed per run). B is then the exec
 * reference given the same caps: `wg show dump` + `nft -j list table ip wg_ref_wgapi0` per
 * request, that table a copy of the daemon's (quota objects with their counters, the caps map,
 * the suspended set; no hooks) made with `nft -f`. Kind P polls A's partial list
 * `?fields=BENCH_FIELDS` (default public_key,status,data_cap.used_bytes): its body as a share of
 * the full one and P/A, its polls/s over the full list's. The raw costs and the lone request are
 * the plain device's, skipped. A table per size: A, A0, B, C, A/C, A0/C, A/B, A0/B, peak RSS,
 * socket errors (autocannon's errors + non-2xx, summed over the rounds), A's first list.
 *
 * The start on an existing capped interface (issue 29's "the first list after a start ... within
 * 2x one bare kernel read of it"), per size in capped mode, before the load runs: BENCH_START_RUNS
 * (3) spawns of the daemon (and of R, R2, alternating) with no other load, each timed from its
 * spawn to the first connection it accepts (it listens; polled every 50 ms) and to its first
 * 200 to GET /api/peers, asked for from that moment; the first list is given both from spawn
 * and from listening, with its `wg-peerd is serving` line (READY=1, sent after the start's
 * read). Beside them `node <flags> -e 0` and `main.js --version` (node with the daemon's
 * top-level modules), and one bare kernel read both ways: the raw netlink dumps of the device,
 * the caps table's quota objects and its caps map, received and split but not decoded (on fresh
 * sockets, as a start has), and the kernel's own tools, `wg show IF dump` + `nft -j list table
 * ip wg_peerd_IF`, as processes (a labelled baseline). BENCH_START_ONLY=1: nothing else per size.
 *
 * Knobs (environment): BENCH_SIZES (default "1000,10000,50000"), BENCH_ROUNDS (3),
 * BENCH_CONNECTIONS (8), BENCH_WARMUP_S (15), BENCH_DURATION_S (10), BENCH_LONG_DURATION_S (30:
 * the measured time at 10,000 peers and more, for every server alike, where the baseline needs
 * seconds per answer), BENCH_B_DURATION_S (unset: B's own measured time), BENCH_RAW_RUNS (5), BENCH_CHURN (0.1),
 * BENCH_ALONE_REQUESTS (9), BENCH_ALONE_SIZE (10000: the size of the lone request),
 * BENCH_KINDS (default "A,A0,B,C", plus P with BENCH_FIELDS or BENCH_CAPPED, plus R and R2 with BENCH_REFERENCE_DIR and BENCH_REFERENCE_DIR2: which servers run), BENCH_LOG_DIR (/tmp: the servers' logs), BENCH_START_RUNS (3), BENCH_START_ONLY, BENCH_NODE_FLAGS (node flags for
 * every server, e.g. "--cpu-prof --cpu-prof-dir=/run/vm/out" with scripts/vm/run.sh --out),
 * BENCH_CPU_PROF (kinds to profile alone, e.g. "A": see cpuProfFlags).
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { closeSync, openSync, readFileSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { performance } from 'node:perf_hooks';
import autocannon from 'autocannon';
import { randomPublicKey } from '../test/support/keys';
import { openKernel } from '../src/kernel';
import type { DataCap, Kernel } from '../src/kernel/types';
import { Links } from '../src/kernel/link';
import { WireGuard } from '../src/kernel/wireguard';
import { parseDevice } from '../test/support/wg-table-decode';
import { WG_CMD_GET_DEVICE, deviceReadAttributes } from '../src/kernel/wireguard/schema';
import {
  GENL_HDRLEN,
  GenericNetlink,
  type GenlReply,
  NETLINK_GENERIC,
  type NetlinkMessage,
  NetlinkSocket,
  encodeAttributes,
  genlmsghdr,
  openNativeTransport,
} from '../src/netlink';
import { PeerService, type PeerServiceOptions, type PeerSnapshot } from '../src/peers';
import { listPeers, toPeerJson } from '../test/support/peer-list';
import { PEERS_PER_SLICE, PreviousBodies, buildListBody } from '../src/http/list-body';
import { DumpMemo, decodeDeviceDump } from '../src/kernel/wireguard/dump';
import { NfTables } from '../src/kernel/nftables/client';
import {
  NFT_MSG_GETOBJ,
  NFT_MSG_GETSETELEM,
  NFT_OBJECT_QUOTA,
} from '../src/kernel/nftables/constants';
import { objectAttributes, setElementListAttributes } from '../src/kernel/nftables/schema';
import { CAPS_MAP, QUOTA_FAMILY } from '../src/kernel/quota';
import { CapListing } from '../src/kernel/quota/listing';
import { cappedHostPeer, peerAddress, writeStateDir } from './capped-population';
import { median, startNodeFlags, timed as timedRuns } from './support';

const IFNAME = 'wgapi0';
const SERVER_ADDRESS = { address: '10.77.0.1', prefixLength: 16 };
const LISTEN_HOST = '127.0.0.1';

const numbers = (text: string): number[] => text.split(',').map((s) => Number(s.trim()));
const SIZES = numbers(process.env.BENCH_SIZES ?? '1000,10000,50000');
// Three, not two: the median of two is their mean, and one slow round in an emulated VM (a
// neighbour on the host, a TCG retranslation) then moves a ratio by itself.
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 8);
// 15 s, not 3: in the emulated VM (about ten times slower than native) a CPU profile of the
// daemon and of the ceiling showed each server's JavaScript time per second still falling 10 s
// after its start while V8 optimized its code (the daemon, with more code to optimize, longer),
// so a 3 s warm-up measured start-up, not the steady state a long-running daemon is polled in.
const WARMUP_S = Number(process.env.BENCH_WARMUP_S ?? 15);
const DURATION_S = Number(process.env.BENCH_DURATION_S ?? 10);
const LONG_DURATION_S = Number(process.env.BENCH_LONG_DURATION_S ?? 30);
/** Measured seconds at a size: longer for the biggest, the same for every server. */
const durationAt = (size: number): number => (size >= 10_000 ? LONG_DURATION_S : DURATION_S);
/**
 * Measured seconds of B, the exec reference, when set (BENCH_B_DURATION_S): with the caps, one
 * of its answers alone takes seconds at 10,000 peers in the VM, and 8 at once share one CPU, so
 * a run as long as the others' can end before any answer.
 */
const B_DURATION_S = Number(process.env.BENCH_B_DURATION_S ?? 0);
const RAW_RUNS = Number(process.env.BENCH_RAW_RUNS ?? 5);
const ALONE_REQUESTS = Number(process.env.BENCH_ALONE_REQUESTS ?? 9);
/** The share of peers changed between reads for the raw "churn" figures (BENCH_CHURN). */
const CHURN = Number(process.env.BENCH_CHURN ?? 0.1);
/** The size at which the lone request of Done-when 3 is measured. */
const ALONE_SIZE = Number(process.env.BENCH_ALONE_SIZE ?? 10_000);

/**
 * Issue 29's capped host (BENCH_CAPPED=1): per size, the peers come from a state dir
 * (bench/capped-population.ts: every peer capped, a tenth with a monthly period, a tenth with a
 * speed limit, 1% suspended, 1% throttling) restored by the daemon itself, which is then stopped;
 * B gets the same caps in a table of its own; P polls A's partial list.
 */
const CAPPED = process.env.BENCH_CAPPED === '1';
/** The `fields` of kind P (BENCH_FIELDS; by default the issue's, in capped mode only). */
const FIELDS = process.env.BENCH_FIELDS ?? (CAPPED ? 'public_key,status,data_cap.used_bytes' : '');
const STATE_DIR = '/tmp/bench-api-state';
/** The capped host's server address and port, written into its state dir. */
const CAPPED_INTERFACE = { interfaceName: IFNAME, address: '10.77.0.1/16', listenPort: 51977 };
/** The daemon's two nf_tables tables (src/kernel/quota, src/kernel/suspension). */
const CAPS_TABLE = `wg_peerd_${IFNAME}`;
const SUSPEND_TABLE = `wg_peerd_suspend_${IFNAME}`;
/** The exec reference's own copy of them (B in capped mode). */
const REFERENCE_TABLE = `wg_ref_${IFNAME}`;

type Kind = 'A' | 'A0' | 'B' | 'C' | 'P' | 'R' | 'R2';

/** The path a kind is polled at: P asks for the partial list. */
const pathOf = (kind: Kind): string =>
  kind === 'P' ? `/api/peers?fields=${FIELDS}` : '/api/peers';
/**
 * Other built checkouts whose daemons run as kinds R (BENCH_REFERENCE_DIR) and R2
 * (BENCH_REFERENCE_DIR2), or null: up to three versions side by side in one VM run.
 */
const REFERENCE_DIRS: Partial<Record<Kind, string>> = {
  ...(process.env.BENCH_REFERENCE_DIR ? { R: process.env.BENCH_REFERENCE_DIR } : {}),
  ...(process.env.BENCH_REFERENCE_DIR2 ? { R2: process.env.BENCH_REFERENCE_DIR2 } : {}),
};
const REFERENCE_KINDS = Object.keys(REFERENCE_DIRS) as Kind[];
/** Clock ticks per second of /proc/<pid>/stat's utime and stime (sysconf(_SC_CLK_TCK)). */
let clockTicks = 0;

interface RunResult {
  kind: Kind;
  round: number;
  reqPerSec: number;
  p50: number;
  p99: number;
  rssMiB: number;
  requests: number;
  errors: number;
  non2xx: number;
  /** The server's CPU time (user + system) over the measured load, per request answered. */
  cpuMsPerRequest: number;
  /** Bytes of the server's first answer (C replays A's). */
  bodyBytes: number;
  /** Milliseconds from spawn to the first 200 (a daemon's first list after a start). */
  firstMs: number;
}

interface RawCosts {
  receive: number;
  tableDecode: number;
  /** The fast decoder on a dump it has not seen (no DumpMemo): what Done-when 3 is about. */
  fastDecode: number;
  /** With the DumpMemo of the previous read, nothing changed (idle peers, as in this bench). */
  warmDecode: number;
  /** With the DumpMemo of the previous read, CHURN of the peers changed since it. */
  churnDecode: number;
  /** The body from peers it has no fragments of. */
  bodyBuild: number;
  /** The body again over the same peer objects (fragments reused), written afresh. */
  warmBuild: number;
  /** The same, as the daemon does it: its fragments are the last body's, so that body again. */
  againBuild: number;
  /** The body after a read where CHURN of the peers changed. */
  churnBuild: number;
  wgProcess: number;
  bodyBytes: number;
}

// ---------------------------------------------------------------- small helpers

const ms = (value: number): string => `${value.toFixed(1)} ms`;
const ratio = (a: number, b: number): string => (b > 0 ? `${(a / b).toFixed(2)}x` : 'n/a');
const sleep = (milliseconds: number): Promise<void> =>
  new Promise((resolve) => setTimeout(resolve, milliseconds));

/**
 * A full collection before a phase (node --expose-gc, as rawCostsInChild starts the process), so
 * that each phase pays for its own garbage only: the table codec's five decodes of a 50,000-peer
 * dump leave hundreds of MB behind, and the incremental marking they start finished inside the
 * next phase's timings. Only between phases: the runs of one phase pay each other's garbage.
 */
const gc = (globalThis as { gc?: () => void }).gc;
function settle(): void {
  gc?.();
}

/** The median of `runs` timings of `work`, after a full collection (settle). */
async function timed(runs: number, work: () => unknown): Promise<number> {
  settle();
  return timedRuns(runs, work);
}

interface Fetched {
  status: number;
  contentType: string;
  body: Buffer;
}

function get(port: number, path: string, onConnect?: () => void): Promise<Fetched> {
  return new Promise((resolve, reject) => {
    const req = http.get({ host: LISTEN_HOST, port, path, agent: false }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('end', () =>
        resolve({
          status: res.statusCode ?? 0,
          contentType: String(res.headers['content-type'] ?? ''),
          body: Buffer.concat(chunks),
        }),
      );
      res.on('error', reject);
    });
    if (onConnect !== undefined) req.on('socket', (socket) => socket.once('connect', onConnect));
    req.on('error', reject);
  });
}

// ---------------------------------------------------------------- the device

async function setUpDevice(links: Links, wireguard: WireGuard): Promise<void> {
  await removeDevice(links);
  const index = await links.createWireGuard(IFNAME);
  await wireguard.configureDevice(IFNAME, { privateKey: randomBytes(32), listenPort: 51977 });
  await links.addIpv4Address(index, SERVER_ADDRESS);
  await links.setUp(index);
}

async function removeDevice(links: Links): Promise<void> {
  await links.getLink(IFNAME).then(
    (link) => links.deleteLink(link.index),
    () => undefined,
  );
}

/** Grows the device from `from` to `to` peers, in one bulk call. */
async function growTo(wireguard: WireGuard, from: number, to: number): Promise<void> {
  const peers = [];
  for (let i = from; i < to; i++) {
    peers.push({
      publicKey: randomPublicKey(),
      allowedIps: [{ family: 4 as const, address: peerAddress(i), cidr: 32 }],
    });
  }
  await wireguard.addPeers(IFNAME, peers);
  const device = await wireguard.getDevice(IFNAME);
  if (device.peers.length !== to) {
    throw new Error(`expected ${to} peers on ${IFNAME}, the kernel has ${device.peers.length}`);
  }
}

// ---------------------------------------------------------------- the capped host

function sh(command: string): string {
  return execFileSync('/bin/sh', ['-c', command], { encoding: 'utf8', maxBuffer: 1 << 30 });
}

/** No interface, IFB, or table of the bench's left in the kernel. */
function cleanKernel(): void {
  sh(`ip link del ${IFNAME} 2>/dev/null || true; ip link del ifb-${IFNAME} 2>/dev/null || true`);
  for (const table of [CAPS_TABLE, SUSPEND_TABLE, REFERENCE_TABLE]) {
    sh(`nft delete table ip ${table} 2>/dev/null || true`);
  }
}

/** The top-level blocks of `nft list table` text ("\tquota q_1 {" ... "\t}"), as lines. */
function blocksOf(text: string): { kind: string; name: string; lines: string[] }[] {
  const blocks: { kind: string; name: string; lines: string[] }[] = [];
  let current: { kind: string; name: string; lines: string[] } | null = null;
  for (const line of text.split('\n')) {
    if (current === null) {
      const opening = /^\t(\w+) (\S+) \{$/.exec(line);
      if (opening) current = { kind: opening[1]!, name: opening[2]!, lines: [line] };
      continue;
    }
    current.lines.push(line);
    if (line === '\t}') {
      blocks.push(current);
      current = null;
    }
  }
  return blocks;
}

/**
 * The exec reference's own table: everything of the daemon's caps table (quota objects, maps,
 * chains without their hooks, so no packet meets them) and the suspended set of its suspension
 * table, under another name, loaded with `nft -f`: the same caps, counters included.
 */
function makeReferenceTable(): { quotas: number; suspended: number } {
  const caps = blocksOf(sh(`nft list table ip ${CAPS_TABLE}`));
  const suspension = sh(`nft list table ip ${SUSPEND_TABLE} 2>/dev/null || true`);
  const sets = blocksOf(suspension).filter((block) => block.kind === 'set');
  const names = new Set(caps.map((block) => block.name));
  for (const set of sets) {
    if (names.has(set.name)) throw new Error(`reference table: ${set.name} is in both tables`);
  }
  const lines = [...caps, ...sets].flatMap((block) =>
    block.lines.filter((line) => !/^\t\ttype \S+ hook /.test(line)),
  );
  const file = '/tmp/bench-api-reference.nft';
  writeFileSync(file, `table ip ${REFERENCE_TABLE} {\n${lines.join('\n')}\n}\n`);
  sh(`nft delete table ip ${REFERENCE_TABLE} 2>/dev/null || true; nft -f ${file}`);
  const listed = sh(`nft list table ip ${REFERENCE_TABLE}`);
  return {
    quotas: blocksOf(listed).filter((block) => block.kind === 'quota').length,
    suspended: sets.length,
  };
}

/**
 * The capped host at `size` peers, from nothing: a state dir of the capped population, restored
 * by the daemon itself (spawn to its first full list timed), the daemon stopped, then the exec
 * reference's copy of the caps. The servers then start on the existing interface.
 */
async function makeCappedHost(size: number): Promise<void> {
  cleanKernel();
  const now = Date.now();
  await writeStateDir(STATE_DIR, CAPPED_INTERFACE, size, (i) => cappedHostPeer(i, now));
  const restorer = startServer('A', '', '', [
    '--state-dir',
    STATE_DIR,
    '--address',
    CAPPED_INTERFACE.address,
    '--listen-port',
    String(CAPPED_INTERFACE.listenPort),
    '--endpoint-host',
    '192.0.2.1',
  ]);
  try {
    const first = await firstList(restorer, 'A');
    const restoredMs = performance.now() - restorer.started;
    const body = JSON.parse(first.body.toString()) as {
      total_count: number;
      peers: { data_cap?: unknown; suspended?: boolean }[];
    };
    const capped = body.peers.filter((peer) => peer.data_cap != null).length;
    const suspended = body.peers.filter((peer) => peer.suspended === true).length;
    if (body.total_count !== size || capped !== size) {
      throw new Error(
        `the restore listed ${body.total_count} peers, ${capped} capped: ${size} expected`,
      );
    }
    console.log(
      `  restore of ${size} capped peers from a state dir (spawn to first full list): ${ms(restoredMs)}; ` +
        `${capped} capped, ${suspended} suspended`,
    );
  } finally {
    // The state dir is not used again: no need to wait for the stop's last checkpoint.
    await stopServer(restorer);
  }
  const reference = makeReferenceTable();
  console.log(
    `  exec reference's table ${REFERENCE_TABLE}: ${reference.quotas} quota objects, ` +
      `${reference.suspended ? 'the suspended set' : 'no suspended set'} (copied with nft -f)`,
  );
}

// ---------------------------------------------------------------- the start (issue 29)

/**
 * Spawns of the daemon per size for the start figures (BENCH_START_RUNS; capped mode only,
 * default 3; 0 leaves them out). BENCH_START_ONLY=1: per size, the start figures and nothing else.
 */
const START_RUNS = CAPPED ? Number(process.env.BENCH_START_RUNS ?? 3) : 0;
const START_ONLY = process.env.BENCH_START_ONLY === '1';

/** One start of the daemon on the existing capped interface, no load, times from its spawn. */
interface StartRun {
  /** The first connection it accepted: it listens (to within firstList's 50 ms poll). */
  listeningMs: number;
  /** Its first 200 to GET /api/peers, asked for from the moment it listened. */
  firstMs: number;
  /** Its `wg-peerd is serving` line (after the start's read: READY=1 goes with it), or null. */
  servingMs: number | null;
}

async function startRun(size: number, kind: Kind): Promise<StartRun> {
  const spawnedAt = performance.timeOrigin + performance.now();
  const server = startServer(kind, '', '');
  try {
    const marks: { connected?: number } = {};
    const first = await firstList(server, kind, marks);
    const firstMs = performance.now() - server.started;
    const total = (JSON.parse(first.body.toString()) as { total_count: number }).total_count;
    if (total !== size) throw new Error(`${kind} listed ${total} peers, expected ${size}`);
    if (marks.connected === undefined) throw new Error(`${kind} answered without a connection`);
    return {
      listeningMs: marks.connected - server.started,
      firstMs,
      servingMs: servingLineAt(server.log, spawnedAt),
    };
  } finally {
    await stopServer(server);
  }
}

/** Milliseconds from `spawnedAt` (epoch ms) to the log's `wg-peerd is serving` line, or null. */
function servingLineAt(log: string, spawnedAt: number): number | null {
  for (const line of readFileSync(log, 'utf8').split('\n')) {
    if (!line.includes('"wg-peerd is serving"')) continue;
    const time = (JSON.parse(line) as { time?: string }).time;
    return time === undefined ? null : Date.parse(time) - spawnedAt;
  }
  return null;
}

/** The median wall time of `runs` runs of a command, ms. */
function processMs(runs: number, file: string, args: readonly string[]): number {
  const times: number[] = [];
  for (let i = 0; i < runs; i++) {
    const start = performance.now();
    execFileSync(file, args, { stdio: ['ignore', 'ignore', 'inherit'], maxBuffer: 1 << 30 });
    times.push(performance.now() - start);
  }
  return median(times);
}

/** One bare kernel read of the capped interface: its parts, medians of BENCH_RAW_RUNS, ms. */
interface BareRead {
  /** WG_CMD_GET_DEVICE dump, received and split into messages, not decoded. */
  device: number;
  /** NFT_MSG_GETOBJ dump of the caps table's quota objects, likewise. */
  objects: number;
  /** NFT_MSG_GETSETELEM dump of the caps map (address to quota object), likewise. */
  map: number;
  /** The three in a row, each run on fresh sockets (as a daemon's first read). */
  netlink: number;
  /** `wg show IF dump` as a process. */
  wg: number;
  /** `nft -j list table ip wg_peerd_IF` (the caps table: quotas, the map) as a process. */
  nft: number;
  /**
   * The decode of one read's device and quota object dumps as a start meets them (no memo, every
   * object new), in this process: the first time, then the median of BENCH_RAW_RUNS more.
   */
  decode: { device: [number, number]; objects: [number, number] };
}

/** `work`'s first run and the median of `runs` more, ms: cold against warm code. */
function firstAndWarm(runs: number, work: () => unknown): [number, number] {
  const times: number[] = [];
  for (let i = 0; i <= runs; i++) {
    const start = performance.now();
    work();
    times.push(performance.now() - start);
  }
  return [times[0]!, median(times.slice(1))];
}

async function bareRead(): Promise<BareRead> {
  const genl = new GenericNetlink(new NetlinkSocket(openNativeTransport(NETLINK_GENERIC)));
  const nft = new NfTables(openNativeTransport);
  try {
    const family = await genl.family('wireguard');
    const deviceRequest = Buffer.concat([
      genlmsghdr.encode({ cmd: WG_CMD_GET_DEVICE, version: family.version }),
      encodeAttributes(deviceReadAttributes, { ifname: IFNAME }),
    ]);
    const device = (): Promise<NetlinkMessage[]> =>
      genl.socket.dump(family.id, deviceRequest, { operation: 'WG_CMD_GET_DEVICE (bench)' });
    const objects = (): Promise<NetlinkMessage[]> =>
      nft.dump(
        NFT_MSG_GETOBJ,
        QUOTA_FAMILY,
        encodeAttributes(objectAttributes, { table: CAPS_TABLE, type: NFT_OBJECT_QUOTA }),
        'NFT_MSG_GETOBJ (bench)',
      );
    const map = (): Promise<NetlinkMessage[]> =>
      nft.dump(
        NFT_MSG_GETSETELEM,
        QUOTA_FAMILY,
        encodeAttributes(setElementListAttributes, { table: CAPS_TABLE, set: CAPS_MAP }),
        'NFT_MSG_GETSETELEM (bench)',
      );
    const objectMessages = await objects();
    if (objectMessages.length === 0) throw new Error(`no quota objects in ${CAPS_TABLE}`);
    const deviceMessages = (await device()).map((m) => m.payload.subarray(GENL_HDRLEN));
    // Before anything else here decodes them: the first run is as cold as this process has it.
    const decode = {
      objects: firstAndWarm(RAW_RUNS, () => new CapListing(CAPS_TABLE).objects(objectMessages)),
      device: firstAndWarm(RAW_RUNS, () => decodeDeviceDump(IFNAME, deviceMessages)),
    };
    const fresh = async (): Promise<void> => {
      const g = new GenericNetlink(new NetlinkSocket(openNativeTransport(NETLINK_GENERIC)));
      const n = new NfTables(openNativeTransport);
      try {
        await g.socket.dump(family.id, deviceRequest, { operation: 'WG_CMD_GET_DEVICE (bench)' });
        await n.dump(
          NFT_MSG_GETOBJ,
          QUOTA_FAMILY,
          encodeAttributes(objectAttributes, { table: CAPS_TABLE, type: NFT_OBJECT_QUOTA }),
          'NFT_MSG_GETOBJ (bench)',
        );
        await n.dump(
          NFT_MSG_GETSETELEM,
          QUOTA_FAMILY,
          encodeAttributes(setElementListAttributes, { table: CAPS_TABLE, set: CAPS_MAP }),
          'NFT_MSG_GETSETELEM (bench)',
        );
      } finally {
        g.socket.close();
        n.close();
      }
    };
    return {
      device: await timed(RAW_RUNS, device),
      objects: await timed(RAW_RUNS, objects),
      map: await timed(RAW_RUNS, map),
      netlink: await timed(RAW_RUNS, fresh),
      wg: processMs(RAW_RUNS, 'wg', ['show', IFNAME, 'dump']),
      nft: processMs(RAW_RUNS, 'nft', ['-j', 'list', 'table', 'ip', CAPS_TABLE]),
      decode,
    };
  } finally {
    genl.socket.close();
    nft.close();
  }
}

/**
 * The start figures at one size (issue 29: "the first list after a start on an existing capped
 * interface within 2x one bare kernel read of it"): node alone, node with the daemon's modules,
 * BENCH_START_RUNS spawns of the daemon, and one bare kernel read both ways. Printed; medians.
 */
async function startFigures(size: number): Promise<void> {
  const kinds: Kind[] = ['A', ...REFERENCE_KINDS];
  const runs = new Map<Kind, StartRun[]>(kinds.map((kind) => [kind, []]));
  // Alternating, so that a busy moment of the host falls on every version alike.
  for (let i = 0; i < START_RUNS; i++) {
    for (const kind of kinds) runs.get(kind)!.push(await startRun(size, kind));
  }
  const bare = await bareRead();
  const tools = bare.wg + bare.nft;
  const s = (value: number): string => `${(value / 1000).toFixed(2)} s`;
  for (const kind of kinds) {
    const checkout = REFERENCE_DIRS[kind] ?? '.';
    const flags = daemonNodeFlags(checkout);
    const nodeAlone = processMs(START_RUNS, process.execPath, [...flags, '-e', '0']);
    // --version exits once main.js and every module it imports at its top are loaded.
    const main = `${checkout}/dist/src/main.js`;
    const modules = processMs(START_RUNS, process.execPath, [...flags, main, '--version']);
    const of = runs.get(kind)!;
    const med = (pick: (run: StartRun) => number | null): number =>
      median(of.map(pick).filter((v): v is number => v !== null));
    const first = med((r) => r.firstMs);
    const fromListening = med((r) => r.firstMs - r.listeningMs);
    console.log(
      `  ${kind}: start on the existing interface (${START_RUNS} spawns, no load; medians): node ${flags.join(' ')} -e 0 ${s(nodeAlone)}; ` +
        `main.js --version (node + the daemon's top-level modules) ${s(modules)}; listening ${s(med((r) => r.listeningMs))} after spawn; ` +
        `first list ${s(first)} after spawn, ${s(fromListening)} after it listened; ` +
        `'wg-peerd is serving' ${s(med((r) => r.servingMs))} after spawn ` +
        `[first lists ${of.map((r) => s(r.firstMs)).join(' ')}; from listening ${of.map((r) => s(r.firstMs - r.listeningMs)).join(' ')}]`,
    );
    console.log(
      `  ${kind}: first list / bare netlink read: from spawn ${ratio(first, bare.netlink)}, from listening ${ratio(fromListening, bare.netlink)}; ` +
        `/ the tools' read: from spawn ${ratio(first, tools)}, from listening ${ratio(fromListening, tools)}`,
    );
  }
  console.log(
    `  one bare kernel read (median of ${RAW_RUNS}): netlink, received not decoded: device dump ${ms(bare.device)}, ` +
      `quota objects ${ms(bare.objects)}, caps map ${ms(bare.map)}; the three on fresh sockets ${ms(bare.netlink)}. ` +
      `The kernel's tools: wg show dump ${ms(bare.wg)} + nft -j list table ${ms(bare.nft)} = ${ms(tools)}`,
  );
  const [objectsFirst, objectsWarm] = bare.decode.objects;
  const [deviceFirst, deviceWarm] = bare.decode.device;
  console.log(
    `  their decode as a start meets them (no memo, every object new), in the bench's process: ` +
      `quota objects ${ms(objectsFirst)} the first time, ${ms(objectsWarm)} warm (median of ${RAW_RUNS}); ` +
      `device ${ms(deviceFirst)} the first time, ${ms(deviceWarm)} warm`,
  );
}

// ---------------------------------------------------------------- raw costs

const silentLogger: PeerServiceOptions['logger'] = {
  info: () => undefined,
  warn: () => undefined,
  error: () => undefined,
};

/** The body as the daemon built it before issue 8: listPeers, toPeerJson, JSON.stringify. */
function referenceBody(snapshot: PeerSnapshot): () => Promise<Buffer> {
  // A kernel that hands back the snapshot's pieces, so only the mapping and the serializer run.
  const kernel = {
    wireguard: { getDevice: async () => snapshot.device },
    shaper: { listLimits: async () => new Map(snapshot.limits) },
    quota: { listCaps: async () => new Map<string, DataCap>(snapshot.caps) },
    suspension: { listSuspended: async () => new Map(snapshot.suspended ?? []) },
  } as unknown as PeerServiceOptions['kernel'];
  const service = new PeerService({ kernel, interfaceName: IFNAME, logger: silentLogger });
  return async () => {
    const peers = await listPeers(service, null);
    return Buffer.from(
      JSON.stringify({
        success: true,
        peers: peers.map(toPeerJson),
        total_count: peers.length,
        filter: null,
      }),
    );
  };
}

/** A peer of the bench device: its key and its own tunnel address. */
interface BenchPeer {
  publicKey: string;
  address: string;
}

/**
 * Changes the allowed IPs of CHURN of the peers (a different slice each call: their own /32, plus
 * on odd calls a second /32 of 10.78.0.0/16), so that their dump entries differ from the previous
 * read's, as traffic or a handshake would change them; the rest stay as they were. Allowed IPs,
 * not keepalives: a persistent keepalive makes WireGuard start handshakes (a Curve25519 operation
 * each, retried every 5 s) for every such peer without an endpoint, which loaded the emulated
 * kernel for the rest of the run.
 */
async function churn(wireguard: WireGuard, peers: BenchPeer[], call: number): Promise<void> {
  const count = Math.round(peers.length * CHURN);
  const first = (call * count) % Math.max(1, peers.length);
  const changes = [];
  for (let i = 0; i < count; i++) {
    const at = (first + i) % peers.length;
    const { publicKey, address } = peers[at]!;
    const allowedIps = [{ family: 4 as const, address, cidr: 32 }];
    if (call % 2 === 1) {
      allowedIps.push({ family: 4 as const, address: `10.78.${at >> 8}.${at & 255}`, cidr: 32 });
    }
    changes.push({ publicKey, allowedIps, replaceAllowedIps: true, updateOnly: true });
  }
  if (changes.length > 0) await wireguard.addPeers(IFNAME, changes);
}

/** Puts every peer back to its own /32 alone, as the servers are to see the device. */
async function unchurn(wireguard: WireGuard, peers: BenchPeer[]): Promise<void> {
  await wireguard.addPeers(
    IFNAME,
    peers.map(({ publicKey, address }) => ({
      publicKey,
      allowedIps: [{ family: 4 as const, address, cidr: 32 }],
      replaceAllowedIps: true,
      updateOnly: true,
    })),
  );
}

/** The argument that makes this script the raw-cost child, and the prefix of its one line. */
const RAW_COSTS_ARG = '--raw-costs';

async function rawCosts(
  genl: GenericNetlink,
  kernel: Kernel,
  wireguard: WireGuard,
): Promise<RawCosts> {
  const family = await genl.family('wireguard');
  const request = Buffer.concat([
    genlmsghdr.encode({ cmd: WG_CMD_GET_DEVICE, version: family.version }),
    encodeAttributes(deviceReadAttributes, { ifname: IFNAME }),
  ]);
  const receive = (): Promise<NetlinkMessage[]> =>
    genl.socket.dump(family.id, request, { operation: `WG_CMD_GET_DEVICE ${IFNAME} (bench)` });
  const asReplies = (messages: NetlinkMessage[]): GenlReply[] =>
    messages.map((message) => ({
      cmd: message.payload[0],
      version: message.payload[1],
      attributes: message.payload.subarray(GENL_HDRLEN),
    }));
  const attributesOf = (messages: NetlinkMessage[]): Buffer[] =>
    messages.map((message) => message.payload.subarray(GENL_HDRLEN));

  const replies = asReplies(await receive());
  const receiveMs = await timed(RAW_RUNS, receive);
  const tableDecode = await timed(RAW_RUNS, () => parseDevice(IFNAME, replies));
  const reference = JSON.stringify(parseDevice(IFNAME, replies));
  const messages = replies.map((reply) => reply.attributes);
  if (JSON.stringify(decodeDeviceDump(IFNAME, messages)) !== reference) {
    throw new Error('the fast decoder disagrees with parseDevice on this dump');
  }
  const fastDecode = await timed(RAW_RUNS, () => decodeDeviceDump(IFNAME, messages));
  // Warm: each run decodes a dump received afresh, with the memo of the one before.
  const dumps: Buffer[][] = [];
  for (let i = 0; i <= RAW_RUNS; i++) dumps.push(attributesOf(await receive()));
  const memo = new DumpMemo();
  decodeDeviceDump(IFNAME, dumps[0]!, memo);
  let next = 1;
  const warmDecode = await timed(RAW_RUNS, () => decodeDeviceDump(IFNAME, dumps[next++]!, memo));
  const keys: BenchPeer[] = decodeDeviceDump(IFNAME, messages).peers.map((peer) => ({
    publicKey: peer.publicKey,
    address: peer.allowedIps[0]!.address,
  }));
  let churnCall = 0;
  const churnDecodes: number[] = [];
  settle();
  for (let i = 0; i < RAW_RUNS; i++) {
    await churn(wireguard, keys, churnCall++);
    const changed = attributesOf(await receive());
    const start = performance.now();
    const device = decodeDeviceDump(IFNAME, changed, memo);
    churnDecodes.push(performance.now() - start);
    if (
      JSON.stringify(device) !== JSON.stringify(parseDevice(IFNAME, asReplies(await receive())))
    ) {
      throw new Error('the memoized decode disagrees with parseDevice after churn');
    }
  }

  // The daemon's own service and kernel (with the kernel's DumpMemo), one read per snapshot.
  const service = new PeerService({ kernel, interfaceName: IFNAME, logger: silentLogger });
  const snapshot = await service.snapshot();
  const expected = await referenceBody(snapshot)();
  // Cold: peers freshly decoded (no fragments yet) for every run, outside the timing.
  const coldBuilds: number[] = [];
  settle();
  for (let i = 0; i < RAW_RUNS; i++) {
    const fresh = { ...snapshot, device: decodeDeviceDump(IFNAME, attributesOf(await receive())) };
    const start = performance.now();
    const body = await buildListBody(fresh, null);
    coldBuilds.push(performance.now() - start);
    if (!body.equals(await referenceBody(fresh)())) {
      throw new Error('list-body bytes differ from toPeerJson + JSON.stringify on this snapshot');
    }
  }
  await buildListBody(snapshot, null);
  // Warm: the same peer objects; the body is memoized per snapshot object, so a fresh copy.
  const warmBuild = await timed(RAW_RUNS, () => buildListBody({ ...snapshot }, null));
  const previous = new PreviousBodies();
  const last = await buildListBody({ ...snapshot }, null, PEERS_PER_SLICE, previous);
  const againBuild = await timed(RAW_RUNS, async () => {
    if ((await buildListBody({ ...snapshot }, null, PEERS_PER_SLICE, previous)) !== last) {
      throw new Error('an unchanged snapshot did not give the last body again');
    }
  });
  if (!last.equals(expected)) throw new Error('the last body differs from the reference');
  const churnBuilds: number[] = [];
  settle();
  for (let i = 0; i < RAW_RUNS; i++) {
    await churn(wireguard, keys, churnCall++);
    const changed = await service.snapshot();
    const start = performance.now();
    const body = await buildListBody(changed, null);
    churnBuilds.push(performance.now() - start);
    if (!body.equals(await referenceBody(changed)())) {
      throw new Error('list-body bytes differ from the reference after churn');
    }
  }
  await unchurn(wireguard, keys);
  const wgProcess = await timed(RAW_RUNS, () =>
    execFileSync('wg', ['show', IFNAME, 'dump'], { maxBuffer: 512 * 1024 * 1024 }),
  );
  return {
    receive: receiveMs,
    tableDecode,
    fastDecode,
    warmDecode,
    churnDecode: median(churnDecodes),
    bodyBuild: median(coldBuilds),
    warmBuild,
    againBuild,
    churnBuild: median(churnBuilds),
    wgProcess,
    bodyBytes: expected.length,
  };
}

// ---------------------------------------------------------------- servers under load

let nextPort = 18_100;

interface Server {
  child: ChildProcess;
  port: number;
  log: string;
  started: number;
}

/** The node flags of `npm start` in `checkout` (./support.ts): A and A0 run the daemon as deployed. */
/**
 * BENCH_CPU_PROF: the kinds (e.g. "A") run under V8's sampling profiler, each profile written
 * at its exit as BENCH_CPU_PROF_DIR/<kind>-<port>.cpuprofile (default /run/vm/out, the host's
 * directory of scripts/vm/run.sh --out), sampled every BENCH_CPU_PROF_INTERVAL_US (default
 * 1000 µs; a coarser interval costs the server less). The profile covers the server's whole
 * life: cut it to the measured runs by the samples' times.
 */
const CPU_PROF_KINDS = new Set((process.env.BENCH_CPU_PROF ?? '').split(',').filter(Boolean));

function cpuProfFlags(kind: Kind, port: number): string[] {
  return [
    '--cpu-prof',
    `--cpu-prof-dir=${process.env.BENCH_CPU_PROF_DIR ?? '/run/vm/out'}`,
    `--cpu-prof-name=${kind}-${port}.cpuprofile`,
    `--cpu-prof-interval=${process.env.BENCH_CPU_PROF_INTERVAL_US ?? '1000'}`,
  ];
}

function daemonNodeFlags(checkout = '.'): string[] {
  return startNodeFlags(`${checkout}/dist`);
}

function startServer(
  kind: Kind,
  bodyFile: string,
  contentType: string,
  extra: readonly string[] = [],
): Server {
  const port = nextPort++;
  const listen = `${LISTEN_HOST}:${port}`;
  const reference = REFERENCE_DIRS[kind] ?? null;
  const args =
    kind === 'A' || kind === 'A0' || kind === 'P' || reference !== null
      ? [
          ...daemonNodeFlags(reference ?? '.'),
          reference === null ? 'dist/src/main.js' : `${reference}/dist/src/main.js`,
          '--interface',
          IFNAME,
          '--listen',
          listen,
          ...(kind === 'A0' ? ['--list-max-age', '0'] : []),
          ...extra,
        ]
      : kind === 'B'
        ? [
            'dist/bench/baseline-wg-dump.js',
            '--interface',
            IFNAME,
            '--listen',
            listen,
            ...(CAPPED ? ['--nft-table', REFERENCE_TABLE] : []),
          ]
        : [
            'dist/bench/replay-ceiling.js',
            '--body',
            bodyFile,
            '--content-type',
            contentType,
            '--listen',
            listen,
          ];
  // The server's output (the daemon logs a line per request) goes to a file, read on failure.
  const log = `${process.env.BENCH_LOG_DIR ?? '/tmp'}/bench-api-${kind}-${port}.log`;
  const fd = openSync(log, 'w');
  // BENCH_NODE_FLAGS (e.g. "--cpu-prof --cpu-prof-dir=/run/vm/out"): node flags for every
  // server, to profile them under the same load.
  const nodeFlags = (process.env.BENCH_NODE_FLAGS ?? '').split(' ').filter(Boolean);
  if (CPU_PROF_KINDS.has(kind)) nodeFlags.push(...cpuProfFlags(kind, port));
  const started = performance.now();
  const child = spawn(process.execPath, [...nodeFlags, ...args], { stdio: ['ignore', fd, fd] });
  closeSync(fd);
  return { child, port, log, started };
}

/**
 * CPU time a process has used, ms: utime + stime, fields 14 and 15 of /proc/<pid>/stat (proc(5)),
 * counted after the command name, which is in parentheses and may hold spaces.
 */
function cpuMs(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  // fields[0] is field 3 (state): utime is field 14, stime field 15.
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / clockTicks;
}

function tail(file: string): string {
  return readFileSync(file, 'utf8').split('\n').slice(-15).join('\n');
}

/**
 * Waits until GET /api/peers answers 200 (the first answer may take a full kernel read). With
 * `marks`, polls every 50 ms rather than 250 and notes when the daemon first accepted a
 * connection (performance.now()): the moment it listened, to within the poll.
 */
async function firstList(
  server: Server,
  kind: Kind,
  marks?: { connected?: number },
): Promise<Fetched> {
  // A daemon's first list on a 50,000-peer capped interface took 175 s in the VM (issue 29),
  // and a restore of as many (with a tenth limited) takes minutes before it.
  const deadline = Date.now() + 1_200_000;
  for (;;) {
    if (server.child.exitCode !== null) {
      throw new Error(`${kind} exited with ${server.child.exitCode}:\n${tail(server.log)}`);
    }
    try {
      const onConnect =
        marks === undefined ? undefined : () => (marks.connected ??= performance.now());
      const answer = await get(server.port, pathOf(kind), onConnect);
      if (answer.status === 200) return answer;
      throw new Error(`${kind} answered ${answer.status}: ${answer.body.toString().slice(0, 300)}`);
    } catch (error) {
      if ((error as { code?: unknown }).code !== 'ECONNREFUSED') throw error;
      if (Date.now() > deadline) throw new Error(`${kind} did not listen within 1200 s`);
      await sleep(marks === undefined ? 250 : 50);
    }
  }
}

async function stopServer(server: Server): Promise<void> {
  if (server.child.exitCode !== null) return;
  const exited = new Promise<void>((resolve) => server.child.once('exit', () => resolve()));
  server.child.kill('SIGTERM');
  const killer = setTimeout(() => server.child.kill('SIGKILL'), 10_000);
  await exited;
  clearTimeout(killer);
}

function peakRssMiB(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const match = /^VmHWM:\s+(\d+) kB/m.exec(status);
  if (!match) throw new Error(`no VmHWM in /proc/${pid}/status`);
  return Number(match[1]) / 1024;
}

function load(
  port: number,
  options: { connections: number; duration?: number; amount?: number; path?: string },
): Promise<autocannon.Result> {
  return autocannon({
    url: `http://${LISTEN_HOST}:${port}${options.path ?? '/api/peers'}`,
    connections: options.connections,
    // autocannon rejects an explicit undefined: pass only the one that is set.
    ...(options.amount === undefined ? { duration: options.duration } : { amount: options.amount }),
    // A 50,000-peer answer from the baseline can take many seconds in the emulated VM.
    timeout: 120,
  });
}

async function measure(
  kind: Kind,
  round: number,
  size: number,
  body: { file: string; contentType: string },
): Promise<{ result: RunResult; first: Fetched }> {
  const server = startServer(kind, body.file, body.contentType);
  try {
    const first = await firstList(server, kind);
    const firstMs = performance.now() - server.started;
    if (kind !== 'C') {
      const total = (JSON.parse(first.body.toString()) as { total_count: number }).total_count;
      if (total !== size) throw new Error(`${kind} listed ${total} peers, expected ${size}`);
    }
    const path = pathOf(kind);
    await load(server.port, { connections: CONNECTIONS, duration: WARMUP_S, path });
    const pid = server.child.pid ?? 0;
    const cpuBefore = cpuMs(pid);
    const measured = await load(server.port, {
      connections: CONNECTIONS,
      duration: kind === 'B' && B_DURATION_S > 0 ? B_DURATION_S : durationAt(size),
      path,
    });
    const cpuSpent = cpuMs(pid) - cpuBefore;
    const rssMiB = peakRssMiB(pid);
    if (server.child.exitCode !== null) throw new Error(`${kind} died:\n${tail(server.log)}`);
    const result: RunResult = {
      kind,
      round,
      reqPerSec: measured.requests.total / measured.duration,
      p50: measured.latency.p50,
      p99: measured.latency.p99,
      rssMiB,
      requests: measured.requests.total,
      errors: measured.errors,
      non2xx: measured.non2xx,
      cpuMsPerRequest: measured.requests.total > 0 ? cpuSpent / measured.requests.total : NaN,
      bodyBytes: first.body.length,
      firstMs,
    };
    const problems =
      result.errors || result.non2xx ? `  (errors ${result.errors}, non-2xx ${result.non2xx})` : '';
    console.log(
      `  ${`${kind} round ${round}`.padEnd(12)} ${result.reqPerSec.toFixed(1).padStart(8)} req/s` +
        `  p50 ${ms(result.p50).padStart(10)}  p99 ${ms(result.p99).padStart(10)}` +
        `  peak RSS ${result.rssMiB.toFixed(0).padStart(4)} MiB  CPU ${result.cpuMsPerRequest.toFixed(2)} ms/req` +
        `  body ${result.bodyBytes} B  first answer ${(firstMs / 1000).toFixed(1)} s after spawn  (${result.requests} requests)${problems}`,
    );
    return { result, first };
  } finally {
    await stopServer(server);
  }
}

/** The version pairs compared round by round: A with each reference, and R2 with R. */
function pairsOf(kinds: readonly Kind[]): [Kind, Kind][] {
  const pairs: [Kind, Kind][] = [];
  for (const ref of ['R', 'R2'] as Kind[]) {
    if (kinds.includes('A') && kinds.includes(ref)) pairs.push(['A', ref]);
  }
  if (kinds.includes('R') && kinds.includes('R2')) pairs.push(['R2', 'R']);
  return pairs;
}

/**
 * Two versions compared within each round (they ran next to each other, so load on the shared
 * host hits both alike), then the median of those per-round ratios: req/s of a over b (above 1:
 * a answers more) and CPU per request of a over b (below 1: a spends less).
 */
function pairedLine(runs: readonly RunResult[], a: Kind, b: Kind): string {
  const rpsRatios: number[] = [];
  const cpuRatios: number[] = [];
  for (const run of runs.filter((r) => r.kind === a)) {
    const other = runs.find((r) => r.kind === b && r.round === run.round);
    if (other === undefined) continue;
    rpsRatios.push(run.reqPerSec / other.reqPerSec);
    cpuRatios.push(run.cpuMsPerRequest / other.cpuMsPerRequest);
  }
  const list = (values: number[]): string => values.map((v) => v.toFixed(2)).join(' ');
  return (
    `  ${a}/${b} paired by round: req/s ${list(rpsRatios)} (median ${median(rpsRatios).toFixed(2)}x); ` +
    `CPU/request ${list(cpuRatios)} (median ${median(cpuRatios).toFixed(2)}x)`
  );
}

/** One request at a time on one connection, A0 (or A when A0 is unavailable): its latency. */
async function aloneLatency(kind: Kind): Promise<number> {
  const server = startServer(kind, '', '');
  try {
    await firstList(server, kind);
    await load(server.port, { connections: 1, amount: 2 });
    const measured = await load(server.port, { connections: 1, amount: ALONE_REQUESTS });
    return measured.latency.p50;
  } finally {
    await stopServer(server);
  }
}

// ---------------------------------------------------------------- main

/**
 * A lone request against the sum of its parts, both ways: with the cold decode and build (a
 * device never read before), and with the warm ones the daemon does on an idle device read
 * again (its DumpMemo, fragments and the last body answered again), which is what each of the
 * lone requests after the first does here. The ratio to the warm sum is the request's own overhead.
 */
function aloneParts(raw: RawCosts, alone: number): string {
  const cold = raw.receive + raw.fastDecode + raw.bodyBuild;
  const warm = raw.receive + raw.warmDecode + raw.againBuild;
  return (
    `receive + decode + build cold ${ms(cold)} (alone/cold ${ratio(alone, cold)}), ` +
    `warm ${ms(warm)} (alone/warm ${ratio(alone, warm)})`
  );
}

const CAPPED_MIX =
  'every peer capped, a tenth with a monthly period, a tenth with a speed limit, 1% suspended, 1% throttling';
const CAPPED_HEADER =
  '| peers | A req/s | A0 (window 0) req/s | B exec reference req/s | C ceiling req/s | A/C | A0/C | A/B | A0/B | A/A0 | ' +
  'peak RSS A/A0 MiB | socket errors A/A0/B/C/P | A first list s |\n' +
  '|---|---|---|---|---|---|---|---|---|---|---|---|---|';

/** The medians of a size's runs of `kind` by `pick` (NaN when the kind did not run). */
function medianOf(
  runs: readonly RunResult[],
  kind: Kind,
  pick: (run: RunResult) => number,
): number {
  const of = runs.filter((run) => run.kind === kind);
  return of.length ? median(of.map(pick)) : NaN;
}

/** One row of the capped host's table (CAPPED_HEADER). */
function cappedLine(size: number, runs: readonly RunResult[]): string {
  const rps = (kind: Kind): number => medianOf(runs, kind, (r) => r.reqPerSec);
  const f = (value: number): string => (Number.isNaN(value) ? '-' : value.toFixed(2));
  const peak = (kind: Kind): string => {
    const of = runs.filter((run) => run.kind === kind);
    return of.length ? Math.max(...of.map((run) => run.rssMiB)).toFixed(0) : '-';
  };
  const errors = (kind: Kind): string => {
    const of = runs.filter((run) => run.kind === kind);
    return of.length ? String(of.reduce((sum, run) => sum + run.errors + run.non2xx, 0)) : '-';
  };
  return (
    `| ${size} | ${f(rps('A'))} | ${f(rps('A0'))} | ${f(rps('B'))} | ${f(rps('C'))} | ` +
    `${f(rps('A') / rps('C'))} | ${f(rps('A0') / rps('C'))} | ${f(rps('A') / rps('B'))} | ` +
    `${f(rps('A0') / rps('B'))} | ${f(rps('A') / rps('A0'))} | ${peak('A')}/${peak('A0')} | ` +
    `${(['A', 'A0', 'B', 'C', 'P'] as Kind[]).map(errors).join('/')} | ` +
    `${f(medianOf(runs, 'A', (r) => r.firstMs) / 1000)} |`
  );
}

/** P against A: the partial body's size as a share of the full one, and polls/s. */
function partialLine(runs: readonly RunResult[]): string {
  const bytes = (kind: Kind): number => medianOf(runs, kind, (r) => r.bodyBytes);
  const rps = (kind: Kind): number => medianOf(runs, kind, (r) => r.reqPerSec);
  const perRound = runs
    .filter((run) => run.kind === 'P')
    .map((run) => {
      const full = runs.find((r) => r.kind === 'A' && r.round === run.round);
      return full ? (run.reqPerSec / full.reqPerSec).toFixed(2) : '-';
    })
    .join(' ');
  return (
    `  ?fields=${FIELDS}: body ${bytes('P')} B of ${bytes('A')} B ` +
    `(${((100 * bytes('P')) / bytes('A')).toFixed(1)}% of the full list), ` +
    `P ${rps('P').toFixed(2)} req/s against A ${rps('A').toFixed(2)}: P/A ${(rps('P') / rps('A')).toFixed(2)}x ` +
    `(per round ${perRound}); P peak RSS ${Math.max(...runs.filter((r) => r.kind === 'P').map((r) => r.rssMiB)).toFixed(0)} MiB`
  );
}

async function main(): Promise<void> {
  const runStart = performance.now();
  const kernelVersion = execFileSync('uname', ['-r'], { encoding: 'utf8' }).trim();
  const help = execFileSync(process.execPath, ['dist/src/main.js', '--help'], { encoding: 'utf8' });
  const hasWindow = help.includes('--list-max-age');
  clockTicks = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim());
  const defaultKinds = ['A', 'A0', 'B', 'C', ...(FIELDS === '' ? [] : ['P']), ...REFERENCE_KINDS];
  const wanted = (process.env.BENCH_KINDS ?? defaultKinds.join(','))
    .split(',')
    .map((k) => k.trim());
  const kinds = (['A', 'R', 'R2', 'A0', 'B', 'C', 'P'] as Kind[]).filter(
    (kind) => wanted.includes(kind) && (hasWindow || kind !== 'A0'),
  );
  for (const kind of kinds) {
    const ref = REFERENCE_DIRS[kind];
    if (kind !== 'R' && kind !== 'R2') continue;
    if (ref === undefined)
      throw new Error(`kind ${kind} needs BENCH_REFERENCE_DIR${kind.slice(1)}`);
    // A checkout made with `git archive` (the guest sees no .git of a worktree) has no commit.
    let commit: string;
    try {
      commit = execFileSync('git', ['-C', ref, 'log', '-1', '--format=%h %s'], {
        encoding: 'utf8',
        stdio: ['ignore', 'pipe', 'ignore'],
      }).trim();
    } catch {
      commit = 'not a git checkout';
    }
    console.log(
      `${kind}: the daemon of ${ref} (${commit.slice(0, 90)}), flags ${daemonNodeFlags(ref).join(' ')}`,
    );
  }
  console.log(
    `bench:api: kernel ${kernelVersion}, node ${process.version}, sizes ${SIZES.join(', ')}, ` +
      `${ROUNDS} rounds, ${CONNECTIONS} connections, ${WARMUP_S} s warm-up + ${DURATION_S} s measured ` +
      `(${LONG_DURATION_S} s from 10,000 peers)`,
  );
  if (!hasWindow) console.log('A0 skipped: no --list-max-age');
  if (CAPPED) {
    console.log(
      `capped host: ${CAPPED_MIX}; restored by the daemon from a state dir per size; ` +
        `B is the exec reference (a BASELINE: wg show dump + nft -j list table ip ${REFERENCE_TABLE} per request, ` +
        'the same caps in a table of its own); raw costs and the lone request skipped',
    );
  }
  if (kinds.includes('P')) console.log(`P: A polled at ${pathOf('P')}`);
  if (!CAPPED) {
    console.log(
      `raw costs: in a process of their own, node ${[...daemonNodeFlags(), '--expose-gc'].join(' ')} ` +
        "(npm start's flags; a full collection before each phase)",
    );
    console.log(`churn of the raw "churn" figures: ${(CHURN * 100).toFixed(0)}% of the peers`);
  }

  const links = new Links();
  const wireguard = new WireGuard();
  const summary: {
    size: number;
    raw: RawCosts | null;
    runs: RunResult[];
    alone: number | null;
  }[] = [];
  try {
    if (!CAPPED) await setUpDevice(links, wireguard);
    let peers = 0;
    for (const size of [...SIZES].sort((a, b) => a - b)) {
      const sizeStart = performance.now();
      console.log(`\n== ${size} peers${CAPPED ? ', every one capped' : ''}`);
      const growStart = performance.now();
      if (CAPPED) {
        await makeCappedHost(size);
        if (START_RUNS > 0) await startFigures(size);
        if (START_ONLY) continue;
      } else {
        await growTo(wireguard, peers, size);
        peers = size;
        console.log(`  add peers up to ${size}: ${ms(performance.now() - growStart)}`);
      }

      // The raw costs are the plain device's (they churn its peers): not in capped mode.
      const raw = CAPPED ? null : rawCostsInChild();
      if (raw !== null)
        console.log(
          `  raw costs (median of ${RAW_RUNS}): receive ${ms(raw.receive)}, table decode ${ms(raw.tableDecode)}, ` +
            `fast decode cold ${ms(raw.fastDecode)} / warm ${ms(raw.warmDecode)} / churn ${ms(raw.churnDecode)}, ` +
            `body build cold ${ms(raw.bodyBuild)} / warm ${ms(raw.warmBuild)} (answered again ${ms(raw.againBuild)}) / churn ${ms(raw.churnBuild)} ` +
            `(${(raw.bodyBytes / 1e6).toFixed(2)} MB), wg show dump process ${ms(raw.wgProcess)}`,
        );

      const bodyFile = `/tmp/bench-api-body-${size}.json`;
      const body = { file: bodyFile, contentType: '' };
      const runs: RunResult[] = [];
      for (let round = 1; round <= ROUNDS; round++) {
        for (const kind of kinds) {
          const { result, first } = await measure(kind, round, size, body);
          runs.push(result);
          if (kind === 'A' && body.contentType === '') {
            // C replays the bytes and Content-Type of A's first answer at this size.
            writeFileSync(bodyFile, first.body);
            body.contentType = first.contentType;
          }
        }
      }

      const med = (kind: Kind): number =>
        median(runs.filter((run) => run.kind === kind).map((run) => run.reqPerSec));
      const line = (kind: Kind): string =>
        `  ${kind.padEnd(2)} median ${med(kind).toFixed(1)} req/s: /B ${ratio(med(kind), med('B'))}, /C ${ratio(med(kind), med('C'))}`;
      console.log(line('A'));
      if (hasWindow) console.log(line('A0'));
      for (const kind of REFERENCE_KINDS.filter((k) => kinds.includes(k))) {
        console.log(`${line(kind)}; A/${kind} ${ratio(med('A'), med(kind))}`);
      }
      for (const [a, b] of pairsOf(kinds)) console.log(pairedLine(runs, a, b));

      if (kinds.includes('P') && kinds.includes('A')) console.log(partialLine(runs));
      if (CAPPED) console.log(cappedLine(size, runs));
      let alone: number | null = null;
      if (size === ALONE_SIZE && raw !== null) {
        alone = await aloneLatency(hasWindow ? 'A0' : 'A');
        console.log(
          `  one request alone (${hasWindow ? 'A0' : 'A, no --list-max-age'}, 1 connection, median of ${ALONE_REQUESTS}): ` +
            `${ms(alone)}; ${aloneParts(raw, alone)}`,
        );
      }
      summary.push({ size, raw, runs, alone });
      console.log(
        `  elapsed for ${size} peers: ${((performance.now() - sizeStart) / 1000).toFixed(0)} s`,
      );
    }
    console.log('\n== summary (req/s medians of the rounds; ratios of req/s)');
    console.log(
      '| peers | A req/s | A0 req/s | B req/s | C req/s | A/B | A0/B | A/C | A0/C | A p50/p99 ms | A0 p50/p99 ms | B p50/p99 ms | C p50/p99 ms | peak RSS A/A0/B/C MiB |',
    );
    console.log('|---|---|---|---|---|---|---|---|---|---|---|---|---|---|');
    for (const { size, runs } of summary) {
      const of = (kind: Kind): RunResult[] => runs.filter((run) => run.kind === kind);
      const med = (kind: Kind, pick: (run: RunResult) => number): number =>
        of(kind).length ? median(of(kind).map(pick)) : NaN;
      const rps = (kind: Kind): string =>
        of(kind).length ? med(kind, (r) => r.reqPerSec).toFixed(1) : 'skipped';
      const r = (a: Kind, b: Kind): string =>
        of(a).length && of(b).length
          ? ratio(
              med(a, (x) => x.reqPerSec),
              med(b, (x) => x.reqPerSec),
            )
          : 'n/a';
      const lat = (kind: Kind): string =>
        of(kind).length
          ? `${med(kind, (x) => x.p50).toFixed(0)}/${med(kind, (x) => x.p99).toFixed(0)}`
          : '-';
      const rss = (['A', 'A0', 'B', 'C'] as Kind[])
        .map((kind) =>
          of(kind).length ? Math.max(...of(kind).map((x) => x.rssMiB)).toFixed(0) : '-',
        )
        .join('/');
      console.log(
        `| ${size} | ${rps('A')} | ${rps('A0')} | ${rps('B')} | ${rps('C')} | ${r('A', 'B')} | ${r('A0', 'B')} | ` +
          `${r('A', 'C')} | ${r('A0', 'C')} | ${lat('A')} | ${lat('A0')} | ${lat('B')} | ${lat('C')} | ${rss} |`,
      );
    }
    const churn = `${(CHURN * 100).toFixed(0)}%`;
    if (!CAPPED)
      console.log(
        `\n| peers | receive ms | table decode ms | fast decode cold ms | cold/receive | warm ms | ${churn} churn ms | churn/receive | body build cold ms | warm ms | answered again ms | ${churn} churn ms | body MB | wg show dump process ms |`,
      );
    if (!CAPPED) console.log('|---|---|---|---|---|---|---|---|---|---|---|---|---|---|');
    for (const { size, raw } of summary) {
      if (raw === null) continue;
      const f = (value: number): string => value.toFixed(1);
      console.log(
        `| ${size} | ${f(raw.receive)} | ${f(raw.tableDecode)} | ${f(raw.fastDecode)} | ${ratio(raw.fastDecode, raw.receive)} | ` +
          `${f(raw.warmDecode)} | ${f(raw.churnDecode)} | ${ratio(raw.churnDecode, raw.receive)} | ` +
          `${f(raw.bodyBuild)} | ${f(raw.warmBuild)} | ${f(raw.againBuild)} | ${f(raw.churnBuild)} | ${(raw.bodyBytes / 1e6).toFixed(2)} | ${f(raw.wgProcess)} |`,
      );
    }
    if (CAPPED) {
      console.log(`\n== capped host (${CAPPED_MIX}), medians of ${ROUNDS} round(s)`);
      console.log(CAPPED_HEADER);
      for (const { size, runs } of summary) console.log(cappedLine(size, runs));
    }
    for (const { size, raw, alone } of summary) {
      if (alone === null || raw === null) continue;
      console.log(`\none request alone at ${size} peers: ${ms(alone)}; ${aloneParts(raw, alone)}`);
    }
    console.log(`\ntotal elapsed: ${((performance.now() - runStart) / 1000).toFixed(0)} s`);
  } finally {
    // In the VM the guest is thrown away: deleting a 50,000-peer WireGuard device there takes
    // many minutes (the RTM_DELLINK send blocks in the kernel while it removes peer after peer).
    if (process.env.WG_PEERD_VM !== '1') await removeDevice(links);
    wireguard.close();
    links.close();
  }
}

/**
 * The raw costs in a process of their own, started with the daemon's node flags (those of `npm
 * start`) and --expose-gc: the decode and build figures are the daemon's code under the daemon's
 * runtime. Not in this process: autocannon's WebAssembly histograms crashed under those flags in
 * the emulated VM (RuntimeError: unreachable, twice in two runs), and this process runs them.
 */
function rawCostsInChild(): RawCosts {
  const output = execFileSync(
    process.execPath,
    [...daemonNodeFlags(), '--expose-gc', 'dist/bench/api.js', RAW_COSTS_ARG],
    { encoding: 'utf8', maxBuffer: 16 * 1024 * 1024, stdio: ['ignore', 'pipe', 'inherit'] },
  );
  const line = output.split('\n').find((text) => text.startsWith(RAW_COSTS_ARG));
  if (line === undefined) throw new Error(`the raw-cost process printed no figures:\n${output}`);
  return JSON.parse(line.slice(RAW_COSTS_ARG.length)) as RawCosts;
}

/** The child of rawCostsInChild: measures on the device the parent grew, prints one line. */
async function rawCostsMain(): Promise<void> {
  const kernel = await openKernel();
  const wireguard = new WireGuard();
  const genl = new GenericNetlink(new NetlinkSocket(openNativeTransport(NETLINK_GENERIC)));
  try {
    console.log(`${RAW_COSTS_ARG}${JSON.stringify(await rawCosts(genl, kernel, wireguard))}`);
  } finally {
    genl.socket.close();
    kernel.close();
    wireguard.close();
  }
}

(process.argv.includes(RAW_COSTS_ARG) ? rawCostsMain() : main()).catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
