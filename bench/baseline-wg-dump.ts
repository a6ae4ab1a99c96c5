/**
 * BASELINE for `npm run bench:api` (B) — NOT product code, never shipped or imported by src/.
 *
 * What most WireGuard peer managers do: a plain node http server that answers GET /api/peers by
 * running `wg show <if> dump` as a process on every request, parsing its text and returning the
 * five SPEC.md fields per peer (public_key, ip_address, last_handshake, minutes_since_handshake,
 * status) plus success / total_count / filter. It exists only to be measured next to the daemon.
 *
 * Usage: node dist/bench/baseline-wg-dump.js --interface IF --listen HOST:PORT
 */
import { execFile } from 'node:child_process';
import http from 'node:http';
import { parseWgDump } from '../test/support/wg-dump';
import { livenessOf } from '../src/peers/status';

function option(name: string): string {
  const at = process.argv.indexOf(name);
  const value = at >= 0 ? process.argv[at + 1] : undefined;
  if (value === undefined) throw new Error(`baseline: ${name} is required`);
  return value;
}

const ifname = option('--interface');
const [host, port] = option('--listen').split(':');

function wgDump(): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(
      'wg',
      ['show', ifname, 'dump'],
      { encoding: 'utf8', maxBuffer: 512 * 1024 * 1024 },
      (error, stdout, stderr) =>
        error ? reject(new Error(stderr || error.message)) : resolve(stdout),
    );
  });
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
  wgDump().then(
    (text) => {
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
        peers.push({
          public_key: peer.publicKey,
          ip_address: host32 === undefined ? null : host32.slice(0, -3),
          last_handshake: liveness.lastHandshake,
          minutes_since_handshake: liveness.minutesSinceHandshake,
          status: liveness.status,
        });
      }
      send(res, 200, { success: true, peers, total_count: peers.length, filter });
    },
    (error: Error) => send(res, 500, { success: false, error: error.message }),
  );
});

server.listen(Number(port), host, () => console.log(`baseline listening on ${host}:${port}`));
process.on('SIGTERM', () => process.exit(0));
