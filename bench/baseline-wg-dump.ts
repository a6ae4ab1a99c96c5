/**
 * BASELINE for `npm run bench:api` (B) — NOT product code, never shipped or imported by src/.
 *
 * What most WireGuard peer managers do: a plain node http server that answers GET /api/peers by
 * running `wg show <if> dump` as a process on every request, parsing its text and returning the
 * five SPEC.md fields per peer (public_key, ip_address, last_handshake, minutes_since_handshake,
 * status) plus success / total_count / filter. It exists only to be measured next to the daemon.
 *
 * With `--nft-table NAME` (issue 29's capped host: the same caps in an nf_tables table of its
 * own, `table ip NAME` with the quota objects, the `caps` map of address to quota and the
 * `suspended` set, as the daemon's two tables hold them), every request also runs `nft -j list
 * table ip NAME` beside the dump (both at once) and each peer gets `data_cap` (quota_bytes,
 * used_bytes; null without a cap) and `suspended`: what a peer manager shelling out for caps does.
 *
 * Usage: node dist/bench/baseline-wg-dump.js --interface IF --listen HOST:PORT [--nft-table NAME]
 */
import { type ChildProcess, execFile } from 'node:child_process';
import http from 'node:http';
import { parseWgDump } from '../test/support/wg-dump';
import { livenessOf } from '../src/peers/status';

function optional(name: string): string | undefined {
  const at = process.argv.indexOf(name);
  return at >= 0 ? process.argv[at + 1] : undefined;
}

function option(name: string): string {
  const value = optional(name);
  if (value === undefined) throw new Error(`baseline: ${name} is required`);
  return value;
}

const ifname = option('--interface');
const [host, port] = option('--listen').split(':');
const nftTable = optional('--nft-table');

/** The processes of requests in flight, killed with the server so none outlives it. */
const running = new Set<ChildProcess>();

function run(command: string, args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = execFile(
      command,
      args,
      { encoding: 'utf8', maxBuffer: 512 * 1024 * 1024 },
      (error, stdout, stderr) => {
        running.delete(child);
        if (error) reject(new Error(stderr || error.message));
        else resolve(stdout);
      },
    );
    running.add(child);
  });
}

const wgDump = (): Promise<string> => run('wg', ['show', ifname, 'dump']);

interface Caps {
  /** Tunnel address → the cap's quota and used bytes. */
  caps: Map<string, { quota_bytes: number; used_bytes: number }>;
  suspended: Set<string>;
}

/** `nft -j list table ip NAME`: quota objects, the caps map and the suspended set. */
async function nftCaps(table: string): Promise<Caps> {
  type Element = string | { elem: { val: string } };
  const listed = JSON.parse(await run('nft', ['-j', 'list', 'table', 'ip', table])) as {
    nftables: Array<{
      quota?: { name: string; bytes: number; used?: number };
      map?: { name: string; elem?: Array<[Element, string]> };
      set?: { name: string; elem?: Element[] };
    }>;
  };
  const address = (e: Element): string => (typeof e === 'string' ? e : e.elem.val);
  const quotas = new Map<string, { quota_bytes: number; used_bytes: number }>();
  const caps: Caps = { caps: new Map(), suspended: new Set() };
  for (const entry of listed.nftables) {
    if (entry.quota) {
      quotas.set(entry.quota.name, {
        quota_bytes: entry.quota.bytes,
        used_bytes: entry.quota.used ?? 0,
      });
    }
  }
  for (const entry of listed.nftables) {
    if (entry.map?.name === 'caps') {
      for (const [key, name] of entry.map.elem ?? []) {
        const quota = quotas.get(name);
        if (quota !== undefined) caps.caps.set(address(key), quota);
      }
    }
    if (entry.set?.name === 'suspended') {
      for (const element of entry.set.elem ?? []) caps.suspended.add(address(element));
    }
  }
  return caps;
}

function send(res: http.ServerResponse, status: number, body: unknown): void {
  const bytes = Buffer.from(JSON.stringify(body));
  res.writeHead(status, {
    'Content-Type': 'application/json; charset=utf-8',
    'Content-Length': bytes.length,
  });
  res.end(bytes);
}

const server = http.createServer((req, res) => {
  const url = new URL(req.url ?? '/', 'http://baseline');
  if (req.method !== 'GET' || url.pathname !== '/api/peers') {
    send(res, 404, { success: false, error: 'not found' });
    return;
  }
  const filter = url.searchParams.get('status');
  if (filter !== null && filter !== 'ALIVE' && filter !== 'DEAD') {
    send(res, 400, { success: false, error: 'status must be ALIVE or DEAD' });
    return;
  }
  Promise.all([wgDump(), nftTable === undefined ? null : nftCaps(nftTable)]).then(
    ([text, caps]) => {
      const now = Date.now();
      const peers = [];
      for (const peer of parseWgDump(text).peers) {
        const liveness = livenessOf(
          peer.latestHandshake === 0 ? null : new Date(peer.latestHandshake * 1000),
          now,
        );
        if (filter !== null && liveness.status !== filter) continue;
        // The tunnel address: the first IPv4 /32 among the allowed IPs, as the daemon keys it.
        const host32 = peer.allowedIps.find((ip) => ip.endsWith('/32') && !ip.includes(':'));
        const address = host32 === undefined ? null : host32.slice(0, -3);
        peers.push({
          public_key: peer.publicKey,
          ip_address: address,
          last_handshake: liveness.lastHandshake,
          minutes_since_handshake: liveness.minutesSinceHandshake,
          status: liveness.status,
          ...(caps === null
            ? {}
            : {
                data_cap: (address !== null && caps.caps.get(address)) || null,
                suspended: address !== null && caps.suspended.has(address),
              }),
        });
      }
      send(res, 200, { success: true, peers, total_count: peers.length, filter });
    },
    (error: Error) => send(res, 500, { success: false, error: error.message }),
  );
});

server.listen(Number(port), host, () => console.log(`baseline listening on ${host}:${port}`));
process.on('SIGTERM', () => {
  // A request's wg or nft left running would load the next server measured.
  for (const child of running) child.kill('SIGKILL');
  process.exit(0);
});
