/**
 * `npm run bench:restore` (issue 16, "Done when" 5): the state directory's costs, in one VM run
 * (as root, by scripts/vm/bench-restore.sh). Not a test and not part of CI: it prints figures.
 *
 * 1. Restore. A state dir holding BENCH_RESTORE_PEERS peers (default 50,000: distinct /32s of
 *    10.77.0.0/16, each with a speed limit and a data cap that has counted bytes) is written with
 *    the daemon's own store (src/state), as a daemon of an earlier boot would have left it. Then,
 *    BENCH_ROUNDS times alternating, on a kernel without the interface, its IFB or its table:
 *    D  the daemon (`node <npm start's flags> dist/src/main.js --state-dir ...`) creates the
 *       interface and puts everything back; its own figure is the `milliseconds` of its
 *       `state_restored` log line (kernel read, plan, the kernel changes, journal rewrite); also
 *       from spawn to the first 200 of /readyz, beside the same start on an empty state dir;
 *    K  the kernel's own bulk tools putting the same state back: `ip link add` + `wg addconf`
 *       (the `wg showconf` of D's result) + address + up; `ip link add` of the IFB + `tc -batch`
 *       (the same HTB classes and u32 tables as the daemon's layout, src/kernel/shaper); and
 *       `nft -f` (the `nft list table` of D's result: the quotas with their `used` bytes).
 *    Both results are checked against each other with wg, tc and nft (peers, classes and rates,
 *    quotas with bytes and used) before any figure is printed.
 * 2. Polls. On the restored interface, GET /api/peers under autocannon (BENCH_CONNECTIONS, 8),
 *    BENCH_ROUNDS rounds alternating: the daemon without a state dir, and with one and
 *    `--usage-save-interval` BENCH_SAVE_INTERVAL_S (the default is 10). p50, p99, req/s, and how
 *    many checkpoints in the measurement shared the list's read or read the caps themselves. The
 *    peers are idle: a checkpoint reads all counters and writes only changed ones (none here).
 *    At 50,000 peers a list read takes most of a minute in the VM: give BENCH_DURATION_S several
 *    minutes, or a run sees a handful of answers.
 * 3. Creates. 50 concurrent POST /api/peer on a fresh interface, BENCH_ROUNDS rounds alternating
 *    with and without a state dir: the time until all 50 answered.
 *
 * 4. Metrics (issues 29 and 32; only when BENCH_PARTS names it). On the restored interface, per
 *    `--metrics-per-peer` true then false, one daemon without a state dir and with the longest
 *    `--list-max-age` (60 s), so that one kernel read serves a whole sequence: each round a
 *    window opened by a scrape (kernel read + render: "fresh"), then scrapes sharing it, the gzip
 *    scrapes (the first compresses the read's peer half), the lists on the same read; and a
 *    window opened by a list (kernel read + list body), then a scrape rendering on the list's
 *    read. Sizes plain and gzip, series (sample lines), times with their ratio to the fresh
 *    list. Each scrape's own kernel read count says whether a read ahead ran in a window.
 *
 * Knobs: BENCH_RESTORE_PEERS (50000), BENCH_ROUNDS (3), BENCH_CONNECTIONS (8), BENCH_WARMUP_S
 * (10), BENCH_DURATION_S (30), BENCH_CREATES (50), BENCH_PARTS ("restore,polls,creates"; add
 * "metrics" for part 4, "daemon" for the daemon's restore alone with its time by phase),
 * BENCH_SAVE_INTERVAL_S (1: the polls part's --usage-save-interval with a state dir; a list such
 * as "10,100" measures each, every round),
 * BENCH_CAPPED (unset; 1: the capped host's population of bench/capped-population.ts, for
 * every part, the restore part's tools given the limited peers' classes and every table of the
 * daemon's, compared table by table with nft -j),
 * BENCH_LIMITS (1; 0 writes the peers with caps but no speed limits, for the polls, creates and
 * metrics parts only: a checkpoint reads caps, not limits, and the kernel takes about 45 minutes of TCG
 * time to make 50,000 HTB classes, by the daemon or by tc -batch alike), BENCH_CPU_PROF_DIR
 * (unset; a directory: each daemon writes a V8 CPU profile there, daemon-PORT.cpuprofile, PORT
 * as in its log's name; with run.sh --out, /run/vm/out brings them to the host).
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { closeSync, mkdirSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { performance } from 'node:perf_hooks';
import { gunzipSync } from 'node:zlib';
import autocannon from 'autocannon';
import { cappedHostPeer, peerAddress, shaperTcBatch, writeStateDir } from './capped-population';
import { median, startNodeFlags } from './support';

const IFNAME = 'wgrs0';
const IFB = `ifb-${IFNAME}`;
const TABLE = `wg_peerd_${IFNAME}`;
const SERVER = '10.77.0.1/16';
const PORT_BASE = 18300;
const WORK = '/tmp/bench-restore';
const PEERS = Number(process.env.BENCH_RESTORE_PEERS ?? 50_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 8);
const WARMUP_S = Number(process.env.BENCH_WARMUP_S ?? 10);
const DURATION_S = Number(process.env.BENCH_DURATION_S ?? 30);
const CREATES = Number(process.env.BENCH_CREATES ?? 50);
const PARTS = (process.env.BENCH_PARTS ?? 'restore,polls,creates').split(',');
const LIMITS = process.env.BENCH_LIMITS !== '0';
/**
 * BENCH_CAPPED=1 (issue 29): the capped host's population (bench/capped-population.ts: every peer
 * a cap, a tenth a period, a tenth a limit, 1% suspended, 1% throttling) instead of a limit and
 * a cap on every peer; the restore part's tools then get only the limited peers' classes, and
 * `nft -f` every table the daemon made (caps, throttles, suspensions, names, expiries).
 */
const CAPPED = process.env.BENCH_CAPPED === '1';
const SAVE_INTERVALS_S = (process.env.BENCH_SAVE_INTERVAL_S ?? '1').split(',').map(Number);
const CPU_PROF_DIR = process.env.BENCH_CPU_PROF_DIR ?? '';
if (!LIMITS && PARTS.includes('restore')) {
  throw new Error(
    'BENCH_LIMITS=0 is for BENCH_PARTS=polls,creates,metrics: the restore part compares limits',
  );
}

let nextPort = PORT_BASE;

// ---------------------------------------------------------------- helpers

const ms = (value: number): string => `${value.toFixed(0)} ms`;
const sleep = (milliseconds: number): Promise<void> =>
  new Promise((resolve) => setTimeout(resolve, milliseconds));

function sh(cmd: string): string {
  return execFileSync('/bin/sh', ['-c', cmd], { encoding: 'utf8', maxBuffer: 1 << 30 });
}
/** Wall time of a shell command, in ms. */
function timedSh(cmd: string): number {
  const start = performance.now();
  sh(cmd);
  return performance.now() - start;
}

function cleanKernel(): void {
  sh(`ip link del ${IFNAME} 2>/dev/null || true; ip link del ${IFB} 2>/dev/null || true`);
  // Every table the daemon makes for the interface: wg_peerd_<if>, and wg_peerd_<kind>_<if>.
  for (const line of sh('nft list tables 2>/dev/null || true').split('\n')) {
    const m = /^table (\S+) (wg_peerd_\S+)$/.exec(line.trim());
    if (m !== null && (m[2] === TABLE || m[2]!.endsWith(`_${IFNAME}`))) {
      sh(`nft delete table ${m[1]} ${m[2]}`);
    }
  }
}

/** Whole kbit/s, so tc's text shows them exactly. */
const rateOf = (i: number): number => (1000 + (i % 1000)) * 125;
const capOf = (i: number): { quotaBytes: number; usedBytes: number } => ({
  quotaBytes: 1_000_000_000 + i,
  usedBytes: 1000 * i + 7,
});

interface Daemon {
  child: ChildProcess;
  port: number;
  log: string;
  started: number;
}

function startDaemon(args: string[]): Daemon {
  const port = nextPort++;
  const log = `${WORK}/daemon-${port}.log`;
  const fd = openSync(log, 'w');
  const started = performance.now();
  const child = spawn(
    process.execPath,
    [
      ...startNodeFlags('dist'),
      ...(CPU_PROF_DIR === ''
        ? []
        : [
            '--cpu-prof',
            `--cpu-prof-dir=${CPU_PROF_DIR}`,
            `--cpu-prof-name=daemon-${port}.cpuprofile`,
          ]),
      'dist/src/main.js',
      '--interface',
      IFNAME,
      '--address',
      SERVER,
      '--listen-port',
      '51899',
      '--endpoint-host',
      '192.0.2.1',
      '--listen',
      `127.0.0.1:${port}`,
      ...args,
    ],
    { stdio: ['ignore', fd, fd] },
  );
  closeSync(fd);
  return { child, port, log, started };
}

function tail(file: string): string {
  return readFileSync(file, 'utf8').split('\n').slice(-15).join('\n');
}

function request(
  port: number,
  method: string,
  path: string,
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, method, path, agent: false }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (body += chunk));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end();
  });
}

/** Polls /readyz until 200: the ms since spawn, and whether a 503 RESTORING was seen first. */
async function untilReady(daemon: Daemon): Promise<{ ms: number; sawRestoring: boolean }> {
  let sawRestoring = false;
  for (;;) {
    if (daemon.child.exitCode !== null) {
      throw new Error(`the daemon exited (${daemon.child.exitCode}):\n${tail(daemon.log)}`);
    }
    try {
      const reply = await request(daemon.port, 'GET', '/readyz');
      if (reply.status === 200) return { ms: performance.now() - daemon.started, sawRestoring };
      if (reply.body.includes('RESTORING')) sawRestoring = true;
    } catch {
      // not listening yet
    }
    await sleep(50);
  }
}

async function stopDaemon(daemon: Daemon): Promise<void> {
  if (daemon.child.exitCode !== null) return;
  const exited = new Promise<void>((resolve) => daemon.child.once('exit', () => resolve()));
  daemon.child.kill('SIGTERM');
  // A stop makes a last usage checkpoint: at 50,000 caps that is minutes of TCG time.
  const killer = setTimeout(() => {
    console.log(`daemon on port ${daemon.port} still running 600 s after SIGTERM: SIGKILL`);
    daemon.child.kill('SIGKILL');
  }, 600_000);
  await exited;
  clearTimeout(killer);
}

/** The fields of the daemon's `state_restored` log line. */
function restoredLine(daemon: Daemon): Record<string, unknown> {
  const line = readFileSync(daemon.log, 'utf8')
    .split('\n')
    .find((l) => l.includes('"event":"state_restored"'));
  if (line === undefined) throw new Error(`no state_restored line:\n${tail(daemon.log)}`);
  return JSON.parse(line) as Record<string, unknown>;
}

// ---------------------------------------------------------------- the state dir

const STATE = `${WORK}/state`;

/**
 * A state dir as a daemon of another boot left it: N peers with limits and caps that counted, or
 * (BENCH_CAPPED=1) the capped host's population.
 */
async function writeState(): Promise<void> {
  await writeStateDir(
    STATE,
    { interfaceName: IFNAME, address: SERVER, listenPort: 51899 },
    PEERS,
    CAPPED
      ? (i) => cappedHostPeer(i)
      : (i) => ({ cap: capOf(i), limit: LIMITS ? rateOf(i) : null, suspended: false }),
  );
}

/** Peer i's speed limit in bytes per second, or null, in the population written. */
function limitOf(i: number): number | null {
  if (CAPPED) return cappedHostPeer(i).limit;
  return LIMITS ? rateOf(i) : null;
}

/**
 * Every table the daemon made for the interface, as `nft -j list ruleset` gives it, made
 * comparable: handles dropped, set and map elements sorted, entries sorted. Two kernels holding
 * the same tables, objects (with their counters) and elements give the same text.
 */
function nftView(): string {
  const parsed = JSON.parse(sh('nft -j list ruleset')) as {
    nftables: Array<Record<string, unknown>>;
  };
  const ours = (table: unknown): boolean =>
    typeof table === 'string' &&
    (table === TABLE || (table.startsWith('wg_peerd_') && table.endsWith(`_${IFNAME}`)));
  const entries = parsed.nftables
    .filter((entry) => !('metainfo' in entry))
    .map((entry) => {
      const [kind, body] = Object.entries(entry)[0] as [string, Record<string, unknown>];
      if (!ours(kind === 'table' ? body.name : body.table)) return null;
      const rest: Record<string, unknown> = { ...body };
      delete rest.handle;
      if (Array.isArray(rest.elem)) {
        rest.elem = (rest.elem as unknown[]).map((e) => JSON.stringify(e)).sort();
      }
      return JSON.stringify({ [kind]: rest });
    })
    .filter((entry): entry is string => entry !== null)
    .sort();
  return entries.join('\n');
}

// ---------------------------------------------------------------- the kernel's view

interface KernelView {
  peers: number;
  classes: { dev: string; ifb: string };
  filters: { dev: number; ifb: number };
  quotas: string;
  /** BENCH_CAPPED=1: every table of the daemon's, made comparable (nftView). */
  nft?: string;
}

/** HTB classes of a device as "classid rate" lines, sorted (rates as tc prints them). */
function classes(dev: string): string {
  return sh(`tc class show dev ${dev}`)
    .split('\n')
    .map((line) => /^class htb (\S+) .*\brate (\S+) ceil (\S+)/.exec(line))
    .filter((m): m is RegExpExecArray => m !== null)
    .map((m) => `${m[1]} ${m[2]} ${m[3]}`)
    .sort()
    .join('\n');
}

function view(): KernelView {
  const quotas = (
    JSON.parse(sh(`nft -j list table ip ${TABLE}`)) as {
      nftables: Array<{ quota?: { name: string; bytes: number; used?: number } }>;
    }
  ).nftables
    .flatMap((e) => (e.quota ? [`${e.quota.name} ${e.quota.bytes} ${e.quota.used ?? 0}`] : []))
    .sort()
    .join('\n');
  const filters = (dev: string): number =>
    Number(sh(`tc filter show dev ${dev} | grep -c 'flowid\\|link' || true`).trim());
  return {
    peers: Number(sh(`wg show ${IFNAME} peers | wc -l`).trim()),
    classes: { dev: classes(IFNAME), ifb: classes(IFB) },
    filters: { dev: filters(IFNAME), ifb: filters(IFB) },
    quotas,
    ...(CAPPED ? { nft: nftView() } : {}),
  };
}

/** tc -batch for the limited peers (the daemon's layout: capped-population.ts shaperTcBatch). */
function tcBatch(): string {
  const limited: Array<[number, number]> = [];
  for (let i = 0; i < PEERS; i++) {
    const limit = limitOf(i);
    if (limit !== null) limited.push([i, limit]);
  }
  return shaperTcBatch(IFNAME, IFB, limited);
}

// ---------------------------------------------------------------- 1. restore

interface RestoreFigures {
  daemonMs: number[];
  daemonReadyMs: number[];
  emptyReadyMs: number[];
  sawRestoring: boolean[];
  wgMs: number[];
  tcMs: number[];
  nftMs: number[];
}

async function restorePart(): Promise<void> {
  console.log(
    CAPPED
      ? `\n## 1. Restore of ${PEERS} peers of a capped host (every peer a cap, a tenth a limit, a tenth a period, 1% suspended, 1% throttling)\n`
      : `\n## 1. Restore of ${PEERS} peers, each with a speed limit and a data cap\n`,
  );
  let start = performance.now();
  await writeState();
  const journalBytes = Number(sh(`stat -c %s ${STATE}/${IFNAME}/journal`).trim());
  console.log(
    `state dir written with the daemon's store: ${journalBytes} bytes of journal (${ms(performance.now() - start)})`,
  );
  const figures: RestoreFigures = {
    daemonMs: [],
    daemonReadyMs: [],
    emptyReadyMs: [],
    sawRestoring: [],
    wgMs: [],
    tcMs: [],
    nftMs: [],
  };
  let reference: KernelView | undefined;
  const files = { wg: `${WORK}/wg.conf`, tc: `${WORK}/tc.batch`, nft: `${WORK}/nft.txt` };
  writeFileSync(files.tc, tcBatch());

  for (let round = 1; round <= ROUNDS; round++) {
    // D: the daemon.
    cleanKernel();
    const daemon = startDaemon(['--state-dir', STATE]);
    const ready = await untilReady(daemon);
    const line = restoredLine(daemon);
    await stopDaemon(daemon);
    if (line.mode !== 'reboot' || line.restoredPeers !== PEERS) {
      throw new Error(`round ${round}: the daemon restored ${JSON.stringify(line)}`);
    }
    const daemonView = view();
    if (reference === undefined) {
      reference = daemonView;
      sh(`wg showconf ${IFNAME} > ${files.wg}`);
      sh(`nft list table ip ${TABLE} > ${files.nft}`);
      if (CAPPED) {
        // Every table of the daemon's for the interface, one after the other in one file.
        const tables = sh('nft list tables')
          .split('\n')
          .map((line) => /^table (\S+) (wg_peerd_\S+)$/.exec(line.trim()))
          .filter(
            (m): m is RegExpExecArray =>
              m !== null && (m[2] === TABLE || m[2]!.endsWith(`_${IFNAME}`)),
          );
        sh(`: > ${files.nft}`);
        for (const m of tables) sh(`nft list table ${m[1]} ${m[2]} >> ${files.nft}`);
      }
      const expected = Array.from({ length: PEERS }, (_, i) => {
        const { quotaBytes, usedBytes } = CAPPED ? cappedHostPeer(i).cap! : capOf(i);
        return `q_${peerAddress(i).replace(/\./g, '_')} ${quotaBytes} ${usedBytes}`;
      })
        .sort()
        .join('\n');
      if (reference.quotas !== expected) throw new Error('the daemon restored other quotas');
      if (reference.peers !== PEERS)
        throw new Error(`the daemon restored ${reference.peers} peers`);
    } else if (JSON.stringify(daemonView) !== JSON.stringify(reference)) {
      throw new Error(`round ${round}: the daemon's restore differs from round 1's`);
    }
    figures.daemonMs.push(Number(line.milliseconds));
    console.log(
      `round ${round}: the daemon's restore by phase (ms): ${JSON.stringify(line.phases)}`,
    );
    figures.daemonReadyMs.push(ready.ms);
    figures.sawRestoring.push(ready.sawRestoring);

    // The same start on an empty state dir and no interface: what a start costs without a restore.
    cleanKernel();
    const emptyDir = `${WORK}/empty-state`;
    rmSync(emptyDir, { recursive: true, force: true });
    const empty = startDaemon(['--state-dir', emptyDir]);
    figures.emptyReadyMs.push((await untilReady(empty)).ms);
    await stopDaemon(empty);

    // K: the kernel's own tools.
    cleanKernel();
    figures.wgMs.push(
      timedSh(
        `ip link add ${IFNAME} type wireguard && wg addconf ${IFNAME} ${files.wg} && ` +
          `ip addr add ${SERVER} dev ${IFNAME} && ip link set ${IFNAME} up`,
      ),
    );
    figures.tcMs.push(
      timedSh(`ip link add ${IFB} type ifb && ip link set ${IFB} up && tc -batch ${files.tc}`),
    );
    figures.nftMs.push(timedSh(`nft -f ${files.nft}`));
    const toolsView = view();
    if (JSON.stringify(toolsView) !== JSON.stringify(reference)) {
      const diff = (Object.keys(reference) as Array<keyof KernelView>).filter(
        (k) => JSON.stringify(reference![k]) !== JSON.stringify(toolsView[k]),
      );
      throw new Error(
        `round ${round}: the tools' state differs from the daemon's in ${diff}: ` +
          diff
            .map(
              (k) =>
                `${JSON.stringify(reference![k]).slice(0, 300)} vs ${JSON.stringify(toolsView[k]).slice(0, 300)}`,
            )
            .join('; '),
      );
    }
    console.log(
      `round ${round}: D restore ${ms(figures.daemonMs.at(-1)!)} (spawn to ready ${ms(ready.ms)}, ` +
        `503 RESTORING seen: ${ready.sawRestoring}; empty start ${ms(figures.emptyReadyMs.at(-1)!)}); ` +
        `K wg ${ms(figures.wgMs.at(-1)!)} + tc ${ms(figures.tcMs.at(-1)!)} + nft ${ms(figures.nftMs.at(-1)!)}`,
    );
  }
  cleanKernel();
  start = performance.now();
  const d = median(figures.daemonMs);
  const k = median(figures.wgMs) + median(figures.tcMs) + median(figures.nftMs);
  console.log(
    `\n| ${PEERS} peers ${CAPPED ? 'of a capped host' : 'with limits and caps'} (median of ${ROUNDS}) | ms |`,
  );
  console.log('| --- | --- |');
  console.log(`| daemon: restore (state_restored milliseconds) | ${d.toFixed(0)} |`);
  console.log(
    `| daemon: spawn to /readyz 200 | ${median(figures.daemonReadyMs).toFixed(0)} (empty state dir: ${median(figures.emptyReadyMs).toFixed(0)}) |`,
  );
  console.log(
    `| tools: ip link add + wg addconf + ip addr + up | ${median(figures.wgMs).toFixed(0)} |`,
  );
  console.log(`| tools: ip link add (IFB) + tc -batch | ${median(figures.tcMs).toFixed(0)} |`);
  console.log(`| tools: nft -f | ${median(figures.nftMs).toFixed(0)} |`);
  console.log(`| tools: sum | ${k.toFixed(0)} |`);
  console.log(`| daemon / tools | ${(d / k).toFixed(2)}x (target <= 3x) |`);
  console.log(`| daemon / nft -f alone | ${(d / median(figures.nftMs)).toFixed(2)}x |`);
  console.log(
    `| daemon (spawn to ready - empty start) / tools | ${((median(figures.daemonReadyMs) - median(figures.emptyReadyMs)) / k).toFixed(2)}x |`,
  );
}

/**
 * BENCH_PARTS=daemon: the daemon's restore alone, its state_restored line with the time by phase,
 * no tools and no comparison (a look at where the time goes, minutes shorter than part 1).
 */
async function daemonPart(): Promise<void> {
  console.log(`\n## The daemon's restore of ${PEERS} peers${CAPPED ? ' of a capped host' : ''}\n`);
  cleanKernel();
  const daemon = startDaemon(['--state-dir', STATE]);
  const ready = await untilReady(daemon);
  const line = restoredLine(daemon);
  await stopDaemon(daemon);
  console.log(
    `restore ${String(line.milliseconds)} ms (spawn to ready ${ms(ready.ms)}); by phase (ms): ${JSON.stringify(line.phases)}`,
  );
  cleanKernel();
}

// ---------------------------------------------------------------- 2. polls

/** One measured run: without a state dir (`intervalS` null), or with checkpoints every `intervalS`. */
async function pollRun(
  intervalS: number | null,
  round: number,
): Promise<{ p50: number; p99: number; rps: number; checkpoints: number }> {
  const withState = intervalS !== null;
  const daemon = startDaemon(
    withState ? ['--state-dir', STATE, '--usage-save-interval', String(intervalS)] : [],
  );
  try {
    await untilReady(daemon);
    const first = await request(daemon.port, 'GET', '/api/peers');
    const total = (JSON.parse(first.body) as { total_count: number }).total_count;
    if (total !== PEERS) throw new Error(`listed ${total} peers, expected ${PEERS}`);
    const url = `http://127.0.0.1:${daemon.port}/api/peers`;
    await autocannon({ url, connections: CONNECTIONS, duration: WARMUP_S, timeout: 600 });
    /** The last checkpoint's time, and how many checkpoints shared the list's read or made their own. */
    const checkpoint = async (): Promise<{ at: number; list: number; own: number }> => {
      const lines = (await request(daemon.port, 'GET', '/metrics')).body.split('\n');
      const value = (prefix: string): number => {
        const line = lines.find((l) => l.startsWith(prefix));
        return line === undefined ? 0 : Number(line.slice(prefix.length));
      };
      return {
        at: value('wg_peerd_state_last_checkpoint_timestamp_seconds '),
        list: value('wg_peerd_state_checkpoint_reads_total{read="list"} '),
        own: value('wg_peerd_state_checkpoint_reads_total{read="own"} '),
      };
    };
    const none = { at: 0, list: 0, own: 0 };
    const before = withState ? await checkpoint() : none;
    // A socket error (not a timeout, not an HTTP error) is named and counted, not fatal: under a
    // saturated VM the client can be slower to reuse a connection than the daemon's keep-alive.
    const socketErrors = new Map<string, number>();
    const result = await new Promise<autocannon.Result>((resolve, reject) => {
      const instance = autocannon(
        { url, connections: CONNECTIONS, duration: DURATION_S, timeout: 600 },
        (error: unknown, done: autocannon.Result) =>
          error ? reject(error instanceof Error ? error : new Error(String(error))) : resolve(done),
      );
      instance.on('reqError', (error: NodeJS.ErrnoException) => {
        const kind = error.code ?? error.message;
        socketErrors.set(kind, (socketErrors.get(kind) ?? 0) + 1);
      });
    });
    const after = withState ? await checkpoint() : none;
    if (socketErrors.size > 0) {
      console.log(
        `  socket errors: ${[...socketErrors].map(([kind, n]) => `${n} ${kind}`).join(', ')}; the daemon's last lines:\n${tail(daemon.log)}`,
      );
    }
    if (result.timeouts || result.non2xx || result.requests.total === 0) {
      throw new Error(
        `errors ${result.errors} (timeouts ${result.timeouts}), non-2xx ${result.non2xx}`,
      );
    }
    const figures = {
      p50: result.latency.p50,
      p99: result.latency.p99,
      rps: result.requests.total / result.duration,
      checkpoints: withState ? after.list + after.own - before.list - before.own : 0,
    };
    console.log(
      `round ${round} ${withState ? `checkpoints every ${intervalS} s` : 'without state dir'}: ` +
        `p50 ${ms(figures.p50)}, p99 ${ms(figures.p99)}, ${figures.rps.toFixed(2)} req/s ` +
        `(${result.requests.total} requests)` +
        (withState
          ? `; ${after.list - before.list} checkpoints shared the list's read, ${after.own - before.own} read the caps themselves, the last one's time moved ${(after.at - before.at).toFixed(1)} s`
          : '') +
        (CPU_PROF_DIR === '' ? '' : `; daemon-${daemon.port}`),
    );
    return figures;
  } finally {
    await stopDaemon(daemon);
  }
}

async function pollsPart(): Promise<void> {
  console.log(
    `\n## 2. GET /api/peers at ${PEERS} capped peers, ${CONNECTIONS} connections, ${DURATION_S} s measured\n`,
  );
  // The restored state, made once by the daemon.
  cleanKernel();
  const restorer = startDaemon(['--state-dir', STATE]);
  await untilReady(restorer);
  await stopDaemon(restorer);
  type Figures = { p50: number; p99: number; rps: number };
  const without: Figures[] = [];
  const withState = new Map<number, Figures[]>(SAVE_INTERVALS_S.map((s) => [s, []]));
  for (let round = 1; round <= ROUNDS; round++) {
    without.push(await pollRun(null, round));
    for (const intervalS of SAVE_INTERVALS_S) {
      withState.get(intervalS)!.push(await pollRun(intervalS, round));
    }
  }
  const med = (runs: Figures[], key: keyof Figures): number => median(runs.map((r) => r[key]));
  const row = (label: string, runs: Figures[]): string =>
    `| ${label} | ${med(runs, 'p50').toFixed(0)} | ${med(runs, 'p99').toFixed(0)} | ${med(runs, 'rps').toFixed(2)} |`;
  console.log(`\n| median of ${ROUNDS} | p50 ms | p99 ms | req/s |`);
  console.log('| --- | --- | --- | --- |');
  console.log(row('without state dir', without));
  for (const [intervalS, runs] of withState) {
    console.log(row(`with checkpoints (every ${intervalS} s)`, runs));
  }
  for (const [intervalS, runs] of withState) {
    const change = (med(runs, 'p99') / med(without, 'p99') - 1) * 100;
    console.log(
      `p99 with checkpoints every ${intervalS} s / without: ${change >= 0 ? '+' : ''}${change.toFixed(1)}% (target <= +10%)`,
    );
  }
  cleanKernel();
}

// ---------------------------------------------------------------- 3. creates

async function createRun(withState: boolean): Promise<number> {
  cleanKernel();
  const dir = `${WORK}/creates-state`;
  rmSync(dir, { recursive: true, force: true });
  const daemon = startDaemon(withState ? ['--state-dir', dir] : []);
  try {
    await untilReady(daemon);
    const start = performance.now();
    const replies = await Promise.all(
      Array.from({ length: CREATES }, () => request(daemon.port, 'POST', '/api/peer')),
    );
    const elapsed = performance.now() - start;
    const bad = replies.filter((r) => r.status !== 201 && r.status !== 200);
    if (bad.length > 0) throw new Error(`${bad.length} creates failed: ${bad[0].body}`);
    return elapsed;
  } finally {
    await stopDaemon(daemon);
  }
}

async function createsPart(): Promise<void> {
  console.log(`\n## 3. ${CREATES} concurrent creates on a fresh interface\n`);
  const times: Record<'without' | 'with', number[]> = { without: [], with: [] };
  for (let round = 1; round <= ROUNDS; round++) {
    times.without.push(await createRun(false));
    times.with.push(await createRun(true));
    console.log(
      `round ${round}: without state dir ${ms(times.without.at(-1)!)}, with ${ms(times.with.at(-1)!)}`,
    );
  }
  const without = median(times.without);
  const withState = median(times.with);
  console.log(`\n| ${CREATES} concurrent creates (median of ${ROUNDS}) | ms |`);
  console.log('| --- | --- |');
  console.log(`| without state dir | ${without.toFixed(0)} |`);
  console.log(`| with state dir | ${withState.toFixed(0)} |`);
  console.log(`| with / without | ${(withState / without).toFixed(2)}x |`);
  cleanKernel();
}

// ---------------------------------------------------------------- 4. metrics

/** `--list-max-age` of the metrics part: the longest window, so one read is shared by a sequence. */
const METRICS_WINDOW_MS = 60_000;

interface Fetched {
  ms: number;
  bytes: number;
  body: Buffer;
}

/** GET `path` on loopback, the body kept as bytes (gzip not decoded): time to its last byte. */
function fetchTimed(port: number, path: string, gzip: boolean): Promise<Fetched> {
  const start = performance.now();
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        host: '127.0.0.1',
        port,
        path,
        agent: false,
        headers: gzip ? { 'accept-encoding': 'gzip' } : {},
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('end', () => {
          const body = Buffer.concat(chunks);
          if (res.statusCode !== 200) {
            reject(new Error(`GET ${path}: ${res.statusCode} ${body.toString().slice(0, 300)}`));
            return;
          }
          if ((res.headers['content-encoding'] === 'gzip') !== gzip) {
            reject(new Error(`GET ${path}: content-encoding ${res.headers['content-encoding']}`));
            return;
          }
          resolve({ ms: performance.now() - start, bytes: body.length, body });
        });
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end();
  });
}

/** Lines that are samples (not comments, not empty): the series a scrape exports. */
function seriesOf(text: string): number {
  let n = 0;
  for (const line of text.split('\n')) if (line !== '' && !line.startsWith('#')) n += 1;
  return n;
}

/** The daemon's kernel reads so far, from a scrape's own half. */
function kernelReadsOf(text: string): number {
  const m = /^wg_peerd_kernel_read_duration_seconds_count\{result="ok"\} (\d+)$/m.exec(text);
  if (m === null) throw new Error('no kernel read count in the scrape');
  return Number(m[1]);
}

const MB = (bytes: number): string =>
  bytes < 100_000 ? `${(bytes / 1e3).toFixed(1)} kB` : `${(bytes / 1e6).toFixed(1)} MB`;

interface MetricsFigures {
  perPeer: boolean;
  series: number;
  plainBytes: number;
  gzipBytes: number;
  listBytes: number;
  listGzipBytes: number;
  firstListMs: number;
  rssMiB: number;
  /** Each: ms of every measured request of that kind. */
  times: Record<MetricsTimeKind, number[]>;
  /** Windows in which another kernel read than the measured one ran (read ahead): named, not hidden. */
  extraReads: number;
}
type MetricsTimeKind =
  | 'scrapeFresh'
  | 'scrapeShared'
  | 'scrapeOnListRead'
  | 'gzipFirst'
  | 'gzipShared'
  | 'listFresh'
  | 'listOnScrapeRead'
  | 'listShared'
  | 'listGzipShared';

/**
 * One daemon (no state dir, `--list-max-age` the longest, `--metrics-per-peer` as given) on the
 * restored interface. Each round has two windows, each opened by a fresh kernel read after the
 * previous window ran out: M, opened by a scrape (kernel read + render), then scrapes and lists
 * sharing that read; L, opened by a list (kernel read + list body), then a scrape rendering on
 * the list's read. The kernel read counter of every scrape says whether only one read served it.
 */
async function metricsRun(perPeer: boolean): Promise<MetricsFigures> {
  const daemon = startDaemon([
    '--list-max-age',
    String(METRICS_WINDOW_MS),
    '--metrics-per-peer',
    String(perPeer),
  ]);
  const times = Object.fromEntries(
    (
      [
        'scrapeFresh',
        'scrapeShared',
        'scrapeOnListRead',
        'gzipFirst',
        'gzipShared',
        'listFresh',
        'listOnScrapeRead',
        'listShared',
        'listGzipShared',
      ] as const
    ).map((k) => [k, [] as number[]]),
  ) as Record<MetricsTimeKind, number[]>;
  try {
    await untilReady(daemon);
    const first = await fetchTimed(daemon.port, '/api/peers', false);
    const total = (JSON.parse(first.body.toString('utf8')) as { total_count: number }).total_count;
    if (total !== PEERS) throw new Error(`listed ${total} peers, expected ${PEERS}`);
    const firstListMs = performance.now() - daemon.started;
    console.log(
      `--metrics-per-peer ${perPeer}: first list ${ms(firstListMs)} after spawn; windows of ${METRICS_WINDOW_MS / 1000} s`,
    );
    let windowEnd = performance.now() + METRICS_WINDOW_MS;
    const nextWindow = async (): Promise<void> => {
      await sleep(Math.max(0, windowEnd - performance.now()) + 2_000);
    };
    let extraReads = 0;
    let figures: Omit<MetricsFigures, 'times' | 'extraReads' | 'rssMiB'> | undefined;
    for (let round = 1; round <= ROUNDS; round++) {
      // Window M: a scrape opens it.
      await nextWindow();
      const fresh = await fetchTimed(daemon.port, '/metrics', false);
      windowEnd = performance.now() + METRICS_WINDOW_MS;
      const freshText = fresh.body.toString('utf8');
      const reads = kernelReadsOf(freshText);
      const shared = [
        await fetchTimed(daemon.port, '/metrics', false),
        await fetchTimed(daemon.port, '/metrics', false),
      ];
      const gzipFirst = await fetchTimed(daemon.port, '/metrics', true);
      const gzipShared = [
        await fetchTimed(daemon.port, '/metrics', true),
        await fetchTimed(daemon.port, '/metrics', true),
      ];
      const listShared = [
        await fetchTimed(daemon.port, '/api/peers', false),
        await fetchTimed(daemon.port, '/api/peers', false),
      ];
      const listGzip = await fetchTimed(daemon.port, '/api/peers', true);
      const lastText = gunzipSync(gzipShared[1]!.body).toString('utf8');
      // The own half grows by the request series of the routes asked since the fresh scrape:
      // the peer series (wg_peerd_peer_*, wg_peerd_peers*) must be the same; the count given
      // is the later scrape's, the steady one.
      const peerSeries = (text: string): number =>
        seriesOf(
          text
            .split('\n')
            .filter((line) => line.startsWith('wg_peerd_peer'))
            .join('\n'),
        );
      if (peerSeries(lastText) !== peerSeries(freshText)) {
        throw new Error(
          `the gzip scrape has ${peerSeries(lastText)} peer series, the plain one ${peerSeries(freshText)}`,
        );
      }
      const series = seriesOf(lastText);
      const sharedReads = kernelReadsOf(lastText);
      if (sharedReads !== reads) {
        extraReads += 1;
        console.log(`  window M: ${sharedReads - reads} more kernel read(s) than the measured one`);
      }
      times.scrapeFresh.push(fresh.ms);
      times.scrapeShared.push(...shared.map((f) => f.ms));
      times.gzipFirst.push(gzipFirst.ms);
      times.gzipShared.push(...gzipShared.map((f) => f.ms));
      times.listOnScrapeRead.push(listShared[0]!.ms);
      times.listShared.push(listShared[1]!.ms);
      times.listGzipShared.push(listGzip.ms);
      figures = {
        perPeer,
        series,
        plainBytes: fresh.bytes,
        gzipBytes: gzipFirst.bytes,
        listBytes: listShared[0]!.bytes,
        listGzipBytes: listGzip.bytes,
        firstListMs,
      };
      console.log(
        `round ${round} M (kernel read ${reads}): scrape ${MB(fresh.bytes)}, ${series} series: fresh ${ms(fresh.ms)}, ` +
          `shared ${shared.map((f) => ms(f.ms)).join(', ')}; gzip ${MB(gzipFirst.bytes)}: first ${ms(gzipFirst.ms)}, ` +
          `shared ${gzipShared.map((f) => ms(f.ms)).join(', ')}; list ${MB(listShared[0]!.bytes)} on this read ` +
          `${listShared.map((f) => ms(f.ms)).join(', ')}, gzip ${MB(listGzip.bytes)} ${ms(listGzip.ms)}`,
      );

      // Window L: a list opens it, a scrape renders on the list's read.
      await nextWindow();
      const listFresh = await fetchTimed(daemon.port, '/api/peers', false);
      windowEnd = performance.now() + METRICS_WINDOW_MS;
      const onList = await fetchTimed(daemon.port, '/metrics', false);
      const onListReads = kernelReadsOf(onList.body.toString('utf8'));
      if (onListReads !== reads + 1) {
        extraReads += 1;
        console.log(`  window L: ${onListReads - reads - 1} more kernel read(s) than the list's`);
      }
      times.listFresh.push(listFresh.ms);
      times.scrapeOnListRead.push(onList.ms);
      console.log(
        `round ${round} L (kernel read ${onListReads}): list fresh ${ms(listFresh.ms)}; scrape on the list's read ${ms(onList.ms)}`,
      );
    }
    const status = readFileSync(`/proc/${daemon.child.pid}/status`, 'utf8');
    const hwm = /^VmHWM:\s+(\d+) kB$/m.exec(status);
    return {
      ...figures!,
      times,
      extraReads,
      rssMiB: hwm === null ? NaN : Number(hwm[1]) / 1024,
    };
  } finally {
    await stopDaemon(daemon);
  }
}

async function metricsPart(): Promise<void> {
  console.log(
    `\n## 4. GET /metrics beside GET /api/peers at ${PEERS} capped peers, ${ROUNDS} rounds\n`,
  );
  cleanKernel();
  const restorer = startDaemon(['--state-dir', STATE]);
  await untilReady(restorer);
  await stopDaemon(restorer);
  const runs = [await metricsRun(true), await metricsRun(false)];
  const med = (r: MetricsFigures, k: MetricsTimeKind): number => median(r.times[k]);
  const cell = (r: MetricsFigures, k: MetricsTimeKind): string =>
    `${med(r, k).toFixed(0)} (${(med(r, k) / med(r, 'listFresh')).toFixed(2)})`;
  console.log(
    `\n| ${PEERS} capped peers: ms (ratio to a fresh full list) | per-peer series | --metrics-per-peer false |`,
  );
  console.log('| --- | --- | --- |');
  const row = (label: string, f: (r: MetricsFigures) => string): void =>
    console.log(`| ${label} | ${runs.map(f).join(' | ')} |`);
  row('series (sample lines)', (r) => String(r.series));
  row('scrape size, plain / gzip', (r) => `${MB(r.plainBytes)} / ${MB(r.gzipBytes)}`);
  row('scrape, fresh read (kernel read + render)', (r) => cell(r, 'scrapeFresh'));
  row("scrape on a list's read (render)", (r) => cell(r, 'scrapeOnListRead'));
  row('scrape sharing a rendered read', (r) => cell(r, 'scrapeShared'));
  row(
    'gzip scrape: first of a read / sharing',
    (r) => `${cell(r, 'gzipFirst')} / ${cell(r, 'gzipShared')}`,
  );
  row('GET /api/peers size, plain / gzip', (r) => `${MB(r.listBytes)} / ${MB(r.listGzipBytes)}`);
  row('GET /api/peers, fresh read', (r) => cell(r, 'listFresh'));
  row(
    "GET /api/peers on a scrape's read: first / second / gzip",
    (r) =>
      `${cell(r, 'listOnScrapeRead')} / ${cell(r, 'listShared')} / ${cell(r, 'listGzipShared')}`,
  );
  row('first list after spawn', (r) => ms(r.firstListMs));
  row('daemon peak RSS (VmHWM)', (r) => `${r.rssMiB.toFixed(0)} MiB`);
  row('windows with a kernel read besides the measured one', (r) => String(r.extraReads));
  const [withPeers, without] = runs as [MetricsFigures, MetricsFigures];
  console.log(
    `per-peer series: ${((withPeers.series - without.series) / PEERS).toFixed(2)} a peer`,
  );
  // No cleanKernel(): the last part, in a VM that is thrown away, and deleting 50,000 peers and
  // caps took over five minutes of TCG while the shared VM was held for nothing.
}

async function main(): Promise<void> {
  mkdirSync(WORK, { recursive: true });
  console.log(
    `bench:restore: kernel ${sh('uname -r').trim()}, ${PEERS} peers${LIMITS ? '' : ' (caps, no limits)'}, ${ROUNDS} rounds, parts ${PARTS.join(',')}`,
  );
  if (PARTS.includes('restore') || PARTS.includes('polls') || PARTS.includes('metrics')) {
    if (!PARTS.includes('restore')) await writeState();
  }
  if (PARTS.includes('daemon')) {
    if (!PARTS.includes('restore') && !PARTS.includes('polls') && !PARTS.includes('metrics')) {
      await writeState();
    }
    await daemonPart();
  }
  if (PARTS.includes('restore')) await restorePart();
  if (PARTS.includes('polls')) await pollsPart();
  if (PARTS.includes('creates')) await createsPart();
  if (PARTS.includes('metrics')) await metricsPart();
}

main().catch((error: unknown) => {
  console.error(error);
  cleanKernel();
  process.exit(1);
});
