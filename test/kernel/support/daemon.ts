/**
 * Runs the real daemon (`npm start`, or `node dist/src/main.js` behind a command prefix such as
 * `setpriv ...`) for end-to-end kernel tests and talks to it over HTTP.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { httpsCall, type TlsClientOptions } from '../../support/https-client';
import { CLIENT_NS, deleteLink, inNs, q, sh } from './topology';

const REPO = path.resolve(__dirname, '..', '..', '..', '..');

export interface DaemonProcess {
  child: ChildProcess;
  baseUrl: string;
  /** Everything the daemon printed (JSON log lines and errors). */
  output(): string;
  /**
   * SIGTERM to the daemon itself (not to npm, which would die of the signal), then the exit
   * status of `npm start`, which is the daemon's own (null when it was killed by a signal).
   */
  stop(): Promise<number | null>;
  /**
   * SIGKILL to the daemon itself (a crash: no graceful shutdown), then the exit status of
   * `npm start` once it is gone.
   */
  kill(): Promise<number | null>;
  /** Sends `signal` (SIGHUP: re-read the token and TLS files) to the daemon itself. */
  signal(signal: NodeJS.Signals): void;
}

/**
 * The `node dist/src/main.js` process under `npm start` (npm → sh → node), found in /proc; the
 * started process itself when it is that node (a prefix like setpriv execs it).
 */
function daemonPid(npmPid: number): number | undefined {
  const rows = readdirSync('/proc')
    .filter((name) => /^\d+$/.test(name))
    .flatMap((name) => {
      try {
        // /proc/<pid>/stat: "pid (comm) state ppid ..."; comm may hold spaces, so split after ')'.
        const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
        const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
        const args = readFileSync(`/proc/${name}/cmdline`, 'utf8').replace(/\0/g, ' ');
        return [{ pid: Number(name), ppid, args }];
      } catch {
        return []; // the process ended while we looked
      }
    });
  const family = new Set([npmPid]);
  for (let grew = true; grew;) {
    grew = false;
    for (const row of rows) {
      if (family.has(row.ppid) && !family.has(row.pid)) {
        family.add(row.pid);
        grew = true;
      }
    }
  }
  // The node process itself, not the `sh -c "node dist/src/main.js"` npm runs it through.
  return rows.find(
    (row) => family.has(row.pid) && /^(\S*\/)?node\s.*dist\/src\/main\.js/.test(row.args),
  )?.pid;
}

export interface StartOptions {
  args: string[];
  env?: Record<string, string>;
  /** host:port the daemon listens on, to poll until it answers. */
  listen: string;
  token?: string;
  /**
   * A command the daemon runs under, e.g. `['setpriv', '--reuid=65534', ...]`. With a prefix the
   * daemon is started as `<prefix> node dist/src/main.js <args>` without npm: npm needs a
   * writable home and cache, which a dedicated service user does not have (nor does systemd's
   * unit use npm).
   */
  prefix?: string[];
  /**
   * The daemon serves HTTPS: the readiness poll goes over TLS with these options (a client
   * certificate too under mutual TLS), and baseUrl is https://.
   */
  tls?: TlsClientOptions;
}

/** Starts `npm start -- <args>` (or the prefixed node) and resolves once GET /api/peers answers. */
export async function startDaemon(options: StartOptions): Promise<DaemonProcess> {
  const [command, ...commandArgs] =
    options.prefix === undefined
      ? ['npm', 'start', '--silent', '--', ...options.args]
      : [...options.prefix, process.execPath, 'dist/src/main.js', ...options.args];
  const child = spawn(command!, commandArgs, {
    cwd: REPO,
    env: { ...process.env, ...options.env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout?.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr?.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  let done = false;
  void exited.then(() => (done = true));

  const baseUrl = `${options.tls === undefined ? 'http' : 'https'}://${options.listen}`;
  const url = new URL(baseUrl);
  const token = options.token || undefined;
  const deadline = Date.now() + 180_000;
  for (;;) {
    if (done) throw new Error(`the daemon exited before serving:\n${output}`);
    if (Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new Error(`the daemon did not answer within 180 s:\n${output}`);
    }
    try {
      const reply =
        options.tls === undefined
          ? await call({ baseUrl }, 'GET', '/api/peers', { token })
          : await httpsCall(url.hostname, Number(url.port), 'GET', '/api/peers', {
              ...options.tls,
              token,
            });
      if (reply.status === 200) break;
    } catch {
      // not listening yet
    }
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
  /** To the daemon itself, not to npm (which would die of the signal). */
  const send = (signal: NodeJS.Signals): void => {
    const pid = child.pid === undefined ? undefined : daemonPid(child.pid);
    if (pid === undefined) child.kill(signal);
    else process.kill(pid, signal);
  };
  return {
    child,
    baseUrl,
    output: () => output,
    stop: async () => {
      if (!done) send('SIGTERM');
      return exited;
    },
    kill: async () => {
      if (!done) send('SIGKILL');
      return exited;
    },
    signal: send,
  };
}

/** Where a request goes: a started daemon, or any `{ baseUrl: 'http://host:port' }`. */
export interface Target {
  baseUrl: string;
}

export interface CallOptions {
  /** Sent as JSON, with `content-type: application/json`. */
  body?: unknown;
  /** Sent as `authorization: Bearer <token>`. */
  token?: string;
  /** More request headers (lower-case names); they win over the two above. */
  headers?: Record<string, string>;
}

export interface Reply {
  status: number;
  /** As fetch gives them: `.get(name)` is null when absent, repeats are joined with ", ". */
  headers: Headers;
  text: string;
  /** The body parsed as JSON; throws (SyntaxError) when it is not JSON. */
  json<T = Record<string, unknown>>(): T;
}

/**
 * One request on a connection of its own (agent: false), the one HTTP client of the kernel
 * tests. Not fetch nor a keep-alive agent: their pooled connections go stale while a test blocks
 * its event loop in execSync (wg, ip, nft, tc) for longer than the daemon's 5 s keep-alive
 * timeout, and a request sent on one the server is closing for idleness fails ("other side
 * closed", "fetch failed") although the daemon is up; a client-side race that would also hide
 * the real connection errors the soak test counts.
 */
export function call(
  target: Target,
  method: string,
  pathname: string,
  options: CallOptions = {},
): Promise<Reply> {
  const payload = options.body === undefined ? undefined : JSON.stringify(options.body);
  const headers: Record<string, string> = {};
  if (options.token !== undefined) headers.authorization = `Bearer ${options.token}`;
  if (payload !== undefined) headers['content-type'] = 'application/json';
  Object.assign(headers, options.headers);
  return new Promise((resolve, reject) => {
    const req = http.request(
      `${target.baseUrl}${pathname}`,
      { method, headers, agent: false },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => (text += chunk));
        res.on('end', () => {
          const replyHeaders = new Headers();
          // rawHeaders alternates name and value, in the order received.
          for (let i = 0; i + 1 < res.rawHeaders.length; i += 2) {
            replyHeaders.append(res.rawHeaders[i], res.rawHeaders[i + 1]);
          }
          resolve({
            status: res.statusCode ?? 0,
            headers: replyHeaders,
            text,
            json: <T>() => JSON.parse(text) as T,
          });
        });
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    // end(payload) with nothing written yet: Node sends a Content-Length, not a chunked body.
    req.end(payload);
  });
}

export interface JsonResponse {
  status: number;
  headers: Headers;
  body: Record<string, unknown>;
}

/** A request whose answer must be JSON (else it throws), as most of the API's are. */
export async function api(
  daemon: Target,
  method: string,
  pathname: string,
  body?: unknown,
  token?: string,
): Promise<JsonResponse> {
  // An empty token means none here, as it always has for api().
  const reply = await call(daemon, method, pathname, { body, token: token || undefined });
  return { status: reply.status, headers: reply.headers, body: reply.json() };
}

/** GET /metrics; throws (the status and body in the message) unless it answers 200. */
export async function scrape(target: Target, token?: string): Promise<Reply> {
  const reply = await call(target, 'GET', '/metrics', { token });
  if (reply.status !== 200) throw new Error(`GET /metrics answered ${reply.status}: ${reply.text}`);
  return reply;
}

/** What POST /api/peer answers (SPEC.md): the new peer's keys and address, and the server's. */
export interface CreatedPeer {
  success: boolean;
  peer: { ip: string; privateKey: string; publicKey: string };
  server: { publicKey: string; endpoint: string };
}

/**
 * Brings up the client side in the client namespace from nothing but a create response: the
 * WireGuard interface `ifname` (replacing one of that name) with the peer's private key and
 * address (a /24), and the server as its one peer, reachable for `allowedIps`.
 */
export function configureClient(created: CreatedPeer, ifname: string, allowedIps: string): void {
  const dir = mkdtempSync(path.join(tmpdir(), `${ifname}-`));
  const keyFile = path.join(dir, 'private.key');
  writeFileSync(keyFile, `${created.peer.privateKey}\n`, { mode: 0o600 });
  deleteLink(ifname, CLIENT_NS);
  sh(inNs(CLIENT_NS, `ip link add ${q(ifname)} type wireguard`));
  sh(
    inNs(
      CLIENT_NS,
      `wg set ${q(ifname)} private-key ${q(keyFile)} peer ${q(created.server.publicKey)} ` +
        `endpoint ${q(created.server.endpoint)} allowed-ips ${q(allowedIps)}`,
    ),
  );
  sh(inNs(CLIENT_NS, `ip addr add ${q(`${created.peer.ip}/24`)} dev ${q(ifname)}`));
  sh(inNs(CLIENT_NS, `ip link set ${q(ifname)} up`));
}
