/**
 * Issue 20 end to end against a real kernel: the daemon (in this process, so that the webhook
 * timings can be shortened) with its real netlink sockets, a real WireGuard client in the wgcli
 * namespace, SSE streams and webhook receivers over HTTP. Timing-critical shell commands run
 * asynchronously so this process' event loop (which is also the daemon's) is never held.
 *
 * The 150 s boundary: the VM's clock is moved (date -s) to 5 s before the handshake turns 150 s
 * old; the disconnect must come when it does, not before.
 */
import { expect } from 'chai';
import { exec } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { Webhook } from 'standardwebhooks';
import { parseConfig } from '../../src/config';
import { openKernel, watchCapExhaustion } from '../../src/kernel';
import { createLogger } from '../../src/log';
import { SseReader } from '../support/sse';
import { parseWgDump } from '../support/wg-dump';
import { startDaemon, type Daemon } from '../../src/main';
import {
  CLIENT_NS,
  SERVER_UNDERLAY_IP,
  assertInTestVm,
  deleteLink,
  inNs,
  q,
  setupClientNamespace,
  sh,
  teardownClientNamespace,
  CUT_KNOWN_WITHIN_MS,
} from './support/topology';
import { udpCut } from './support/udp-cut';

const run = promisify(exec);
const IFNAME = 'wgev0';
const CLIENT_IF = 'wgevc';
const SUBNET = '10.96.0.0/24';
const SERVER_TUNNEL_IP = '10.96.0.1';
const SECRET = `whsec_${Buffer.alloc(32, 0x5e).toString('base64')}`;
const CAP_BYTES = 30_000;
/** The UDP port the cut probe's datagrams go to, on the server's tunnel address. */
const CUT_PORT = 5_999;

interface Received {
  id: string;
  type: string;
  data: Record<string, unknown>;
  /** Date.now() when it arrived (the VM's clock, moved or not). */
  at: number;
}

/** An SSE client that keeps every event with its arrival time. */
class Stream {
  readonly events: Received[] = [];
  private request: http.ClientRequest | undefined;
  private waiters: Array<() => void> = [];

  constructor(
    private readonly port: number,
    private readonly lastEventId?: string,
  ) {}

  open(): Promise<void> {
    return new Promise((resolve, reject) => {
      const headers: Record<string, string> = {};
      if (this.lastEventId !== undefined) headers['last-event-id'] = this.lastEventId;
      this.request = http.get(
        { host: '127.0.0.1', port: this.port, path: '/api/events', headers },
        (res) => {
          if (res.statusCode !== 200) reject(new Error(`GET /api/events: ${res.statusCode}`));
          res.setEncoding('utf8');
          const reader = new SseReader();
          res.on('data', (chunk: string) => {
            const at = Date.now();
            for (const event of reader.push(chunk)) this.events.push({ ...event, at });
            for (const w of this.waiters.splice(0)) w();
          });
          resolve();
        },
      );
      this.request.on('error', reject);
    });
  }

  /** The first event matching, waiting up to `ms`. */
  async next(match: (e: Received) => boolean, ms: number, what: string): Promise<Received> {
    const deadline = Date.now() + ms;
    for (;;) {
      const found = this.events.find(match);
      if (found) return found;
      const left = deadline - Date.now();
      if (left <= 0) {
        throw new Error(
          `no ${what} within ${ms} ms; got ${this.events.map((e) => e.type).join(', ')}`,
        );
      }
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, Math.min(left, 500));
        this.waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
  }

  close(): void {
    this.request?.destroy();
  }
}

interface Delivery {
  id: string;
  body: string;
  headers: Record<string, string>;
  status: number;
  at: number;
}

/** A webhook receiver: answers each request with the next status of `script` (then 200). */
async function receiver(
  script: number[] = [],
): Promise<{ url: string; got: Delivery[]; close(): Promise<void> }> {
  const got: Delivery[] = [];
  const server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      const status = script.shift() ?? 200;
      const headers = Object.fromEntries(
        Object.entries(req.headers).map(([k, v]) => [k, String(v)]),
      );
      got.push({ id: headers['webhook-id'] ?? '', body, headers, status, at: Date.now() });
      res.writeHead(status).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as net.AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}/hook`,
    got,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

/** A target that accepts connections and never answers. */
async function blackHole(): Promise<{
  url: string;
  connections: () => number;
  close(): Promise<void>;
}> {
  const sockets = new Set<net.Socket>();
  let count = 0;
  const server = net.createServer((socket) => {
    count += 1;
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as net.AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}/never`,
    connections: () => count,
    close: () =>
      new Promise((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

async function call(
  port: number,
  method: string,
  urlPath: string,
  body?: unknown,
): Promise<{ status: number; body: Record<string, unknown>; ms: number }> {
  const started = performance.now();
  const data = body === undefined ? undefined : JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        host: '127.0.0.1',
        port,
        method,
        path: urlPath,
        headers: data ? { 'content-type': 'application/json' } : {},
      },
      (res) => {
        let text = '';
        res.on('data', (c: Buffer) => (text += c.toString()));
        res.on('end', () =>
          resolve({
            status: res.statusCode ?? 0,
            body: text.startsWith('{') ? (JSON.parse(text) as Record<string, unknown>) : {},
            ms: performance.now() - started,
          }),
        );
      },
    );
    req.on('error', reject);
    req.end(data);
  });
}

describe('events: SSE stream and webhooks (real kernel, real client)', function () {
  this.timeout(300_000);
  let daemon: Daemon | undefined;
  let port = 0;
  let good: Awaited<ReturnType<typeof receiver>>;
  let flaky: Awaited<ReturnType<typeof receiver>>;
  let hole: Awaited<ReturnType<typeof blackHole>>;
  const streams: Stream[] = [];
  let clockMovedBy = 0;
  let publicKey = '';
  let peerIp = '';

  const cleanUp = (): void => {
    deleteLink(IFNAME);
    deleteLink(`ifb-${IFNAME}`);
    sh(`nft delete table ip wg_peerd_${IFNAME} 2>/dev/null || true`);
  };

  before(async function () {
    assertInTestVm();
    setupClientNamespace();
    cleanUp();
    good = await receiver();
    // The daemon runs in this process: one request through fetch first, so that its first webhook
    // does not pay for loading and compiling fetch's HTTP client (about 70 ms on the host, ten
    // times that in the VM), a cost of the process' start that the 1 s bound below is not about.
    const warm = await receiver();
    await fetch(warm.url, { method: 'POST', body: '{}' });
    void warm.close(); // resolves once fetch lets its idle keep-alive connection go
    flaky = await receiver([500, 503]);
    hole = await blackHole();
    const dir = mkdtempSync(path.join(tmpdir(), 'wgev-'));
    const hooks = path.join(dir, 'webhooks');
    writeFileSync(
      hooks,
      `# issue 20 kernel test\n${good.url} ${SECRET}\n${flaky.url} ${SECRET}\n${hole.url} ${SECRET}\n`,
      { mode: 0o600 },
    );
    const outcome = parseConfig(
      [
        '--interface',
        IFNAME,
        '--listen',
        '127.0.0.1:18096',
        '--address',
        '10.96.0.1/24',
        '--listen-port',
        '51896',
        '--endpoint-host',
        SERVER_UNDERLAY_IP,
        '--webhooks-file',
        hooks,
        '--log-level',
        'warn',
        // The shared read is peer.cap_exhausted's second source where the kernel holds its
        // notice back (6.12): read four times a second while someone listens.
        '--list-max-age',
        '250',
      ],
      {},
      () => {
        throw new Error('no token file');
      },
    );
    if (outcome.kind !== 'run') throw new Error('expected a configuration');
    // Port 0: any free one (the option itself wants a real port).
    daemon = await startDaemon(
      { ...outcome.config, listen: { host: '127.0.0.1', port: 0 } },
      {
        openKernel: () => openKernel(),
        watchCaps: async (ifname, onExhausted, onError, onTablesChanged) =>
          watchCapExhaustion(ifname, onExhausted, onError, undefined, onTablesChanged),
        logger: createLogger({ level: 'warn' }),
        webhookPolicy: { timeoutMs: 2_000, firstRetryMs: 2_000, giveUpAfterMs: 12_000 },
      },
    );
    port = daemon.address.port;
  });

  after(async function () {
    for (const s of streams) s.close();
    await daemon?.shutdown();
    if (clockMovedBy !== 0) sh(`date -s @$(( $(date +%s) - ${clockMovedBy} )) >/dev/null`);
    await good?.close();
    await flaky?.close();
    await hole?.close();
    deleteLink(CLIENT_IF, CLIENT_NS);
    cleanUp();
    teardownClientNamespace();
  });

  it('streams peer.created when a peer is created through the API', async () => {
    const first = new Stream(port);
    const resumer = new Stream(port);
    streams.push(first, resumer);
    await first.open();
    await resumer.open();
    const created = await call(port, 'POST', '/api/peer');
    expect(created.status).to.equal(201);
    const peer = created.body.peer as { publicKey: string; privateKey: string; ip: string };
    const server = created.body.server as { publicKey: string; endpoint: string };
    publicKey = peer.publicKey;
    peerIp = peer.ip;
    const event = await first.next((e) => e.type === 'peer.created', 5_000, 'peer.created');
    expect(event.data).to.include({
      public_key: publicKey,
      ip_address: peerIp,
      interface: IFNAME,
      origin: 'api',
    });
    // The client, configured from the response alone (no keepalive: no handshake but ours).
    const dir = mkdtempSync(path.join(tmpdir(), 'wgevc-'));
    writeFileSync(path.join(dir, 'key'), `${peer.privateKey}\n`, { mode: 0o600 });
    // Asynchronously: the webhooks of peer.created are being sent by this very process now (a
    // held event loop delayed the first delivery by 2.3 s once, on 6.1).
    await run(inNs(CLIENT_NS, `ip link del ${CLIENT_IF} 2>/dev/null || true`));
    await run(inNs(CLIENT_NS, `ip link add ${CLIENT_IF} type wireguard`));
    await run(
      inNs(
        CLIENT_NS,
        `wg set ${CLIENT_IF} private-key ${q(path.join(dir, 'key'))} peer ${q(server.publicKey)} ` +
          `endpoint ${q(server.endpoint)} allowed-ips ${SUBNET}`,
      ),
    );
    await run(inNs(CLIENT_NS, `ip addr add ${peer.ip}/24 dev ${CLIENT_IF}`));
    await run(inNs(CLIENT_NS, `ip link set ${CLIENT_IF} up`));
    // The resuming stream leaves after peer.created and comes back at the end.
    await resumer.next((e) => e.type === 'peer.created', 5_000, 'peer.created');
    resumer.close();
  });

  it('streams peer.connected within 2 s of the first handshake', async () => {
    const stream = streams[0]!;
    await run(inNs(CLIENT_NS, `busybox ping -c 1 -w 10 -q ${SERVER_TUNNEL_IP}`));
    const event = await stream.next((e) => e.type === 'peer.connected', 10_000, 'peer.connected');
    const handshake = Date.parse(String(event.data.last_handshake));
    // The kernel's own handshake time (wg show dump has it in whole seconds).
    // Asynchronously: peer.connected's webhook is on its way to this very process.
    const dumped = parseWgDump((await run(`wg show ${IFNAME} dump`)).stdout).peers.find(
      (p) => p.publicKey === publicKey,
    )!;
    expect(Math.floor(handshake / 1000)).to.equal(dumped.latestHandshake);
    expect(event.data.at).to.equal(event.data.last_handshake);
    const latency = event.at - handshake;
    console.log(`      peer.connected ${latency} ms after the handshake`);
    expect(latency).to.be.within(0, 2_000);
  });

  it("streams peer.cap_exhausted within 1 s of the packet that exhausts the cap (the kernel's notice; on 6.12, which holds it until the next commit, within 2 s: the next shared read)", async () => {
    const stream = streams[0]!;
    const set = await call(port, 'PATCH', `/api/peer/${encodeURIComponent(publicKey)}/data-cap`, {
      quotaBytes: CAP_BYTES,
    });
    expect(set.status).to.equal(200);
    await stream.next((e) => e.type === 'peer.cap_changed', 5_000, 'peer.cap_changed');
    // 1,400-byte datagrams every 20 ms from the client: the cut is when the first lost one was
    // sent (udp-cut.ts), not when a ping process for it was spawned.
    const cut = await udpCut({
      netns: CLIENT_NS,
      address: SERVER_TUNNEL_IP,
      port: CUT_PORT,
      payloadBytes: 1372,
      intervalMs: 20,
      quietMs: 1_000,
      timeoutMs: 60_000,
    });
    expect(cut.delivered, 'datagrams that passed before the cut').to.be.above(0);
    const event = await stream.next(
      (e) => e.type === 'peer.cap_exhausted',
      5_000,
      'peer.cap_exhausted',
    );
    expect(event.data).to.include({
      public_key: publicKey,
      ip_address: peerIp,
      quota_bytes: CAP_BYTES,
      used_bytes: CAP_BYTES,
    });
    const latency = event.at - cut.cutAt;
    const published = Date.parse(String(event.data.at)) - cut.cutAt;
    console.log(
      `      peer.cap_exhausted ${latency} ms after the exhausting datagram was sent (its at: ${published} ms after it)`,
    );
    // Its `at` is when the daemon published it: at the kernel's notice, or where the kernel holds
    // the notice back (6.12), at the end of the first shared read that found the cap used up
    // (CUT_KNOWN_WITHIN_MS says how soon). Arrival is bounded from there: the stream's client
    // shares the daemon's event loop in this test, whose backlog added 0.1-0.6 s.
    expect(published, 'published soon after the cut').to.be.below(CUT_KNOWN_WITHIN_MS);
    expect(latency - published, 'delivered within 1 s of its publication').to.be.below(1_000);
    // nft agrees that the quota is used up.
    const nft = JSON.parse((await run(`nft -j list table ip wg_peerd_${IFNAME}`)).stdout) as {
      nftables: Array<{ quota?: { bytes: number; used: number } }>;
    };
    const quota = nft.nftables.find((e) => e.quota)?.quota;
    expect(quota!.used).to.be.at.least(quota!.bytes);
  });

  it('streams peer.disconnected when the handshake turns 150 s old (VM clock moved), not before', async () => {
    const stream = streams[0]!;
    const connected = stream.events.find((e) => e.type === 'peer.connected')!;
    const handshake = Date.parse(String(connected.data.last_handshake));
    const boundary = handshake + 150_000;
    // 5 s before the boundary.
    const move = Math.ceil((boundary - 5_000 - Date.now()) / 1000);
    if (move > 0) {
      sh(`date -s @$(( $(date +%s) + ${move} )) >/dev/null`);
      clockMovedBy += move;
    }
    const event = await stream.next(
      (e) => e.type === 'peer.disconnected',
      20_000,
      'peer.disconnected',
    );
    expect(Date.parse(String(event.data.at))).to.equal(boundary);
    const late = event.at - boundary;
    console.log(`      peer.disconnected ${late} ms after the handshake turned 150 s old`);
    // Not before the boundary, and within the read interval (1 s) and its delivery.
    expect(late).to.be.within(0, 2_000);
  });

  it('streams peer.deleted for a peer removed with `wg set ... remove` behind the daemon', async () => {
    const stream = streams[0]!;
    const removedAt = Date.now();
    await run(`wg set ${IFNAME} peer ${q(publicKey)} remove`);
    const event = await stream.next((e) => e.type === 'peer.deleted', 5_000, 'peer.deleted');
    expect(event.data).to.include({ public_key: publicKey, ip_address: peerIp, origin: 'kernel' });
    expect(event.at - removedAt).to.be.below(3_000);
  });

  it('a stream that reconnects with Last-Event-ID gets every event it missed, in order', async () => {
    const first = streams[0]!;
    const leftAt = first.events.find((e) => e.type === 'peer.created')!;
    const resumed = new Stream(port, leftAt.id);
    streams.push(resumed);
    await resumed.open();
    // Once: by now commits have passed (the delete), so 6.12's held-back notice has arrived too.
    expect(first.events.filter((e) => e.type === 'peer.cap_exhausted')).to.have.length(1);
    const expected = first.events.slice(first.events.indexOf(leftAt) + 1).map((e) => e.id);
    await resumed.next((e) => e.id === expected.at(-1), 5_000, 'the replay');
    expect(resumed.events.map((e) => e.id)).to.deep.equal(expected);
    expect(resumed.events.map((e) => e.type)).to.include.members([
      'peer.connected',
      'peer.cap_changed',
      'peer.cap_exhausted',
      'peer.disconnected',
      'peer.deleted',
    ]);
  });

  it('webhooks: a receiver gets the same events, signed (verified with standardwebhooks)', async () => {
    const ids = streams[0]!.events.map((e) => e.id);
    const deadline = Date.now() + 20_000;
    while (Date.now() < deadline && !ids.every((id) => good.got.some((d) => d.id === id))) {
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
    // Every event, at least once (not necessarily in order: up to 4 attempts run at once per
    // target). A second delivery of one id is a retry after a timeout: this process, which is
    // also the receiver, still blocks while it runs some shell commands; the id lets a receiver
    // drop it.
    expect([...new Set(good.got.map((d) => d.id))].sort()).to.deep.equal([...ids].sort());
    const verifier = new Webhook(SECRET);
    for (const delivery of good.got) {
      const streamed = streams[0]!.events.find((e) => e.id === delivery.id)!;
      expect(verifier.verify(delivery.body, delivery.headers)).to.deep.equal(streamed.data);
    }
    // A target that never answers slowed nothing: each event's first delivery reached this
    // receiver within a second of the stream.
    for (const streamed of streams[0]!.events) {
      const first = good.got.find((d) => d.id === streamed.id)!;
      expect(first.at - streamed.at, streamed.id).to.be.below(1_000);
    }
  });

  it('webhooks: a receiver that fails twice then succeeds gets each failed event once more, with the same id', async () => {
    const ids = streams[0]!.events.map((e) => e.id);
    const deadline = Date.now() + 30_000;
    const delivered = () => flaky.got.filter((d) => d.status === 200).map((d) => d.id);
    while (Date.now() < deadline && !ids.every((id) => delivered().includes(id))) {
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
    const failed = flaky.got.filter((d) => d.status !== 200);
    expect(failed).to.have.length(2);
    expect([...delivered()].sort()).to.deep.equal([...ids].sort());
    for (const f of failed) {
      expect(
        flaky.got.filter((d) => d.id === f.id),
        f.id,
      ).to.have.length(failed.filter((x) => x.id === f.id).length + 1);
    }
    // Every attempt verifies, retries included.
    for (const d of flaky.got)
      expect(() => new Webhook(SECRET).verify(d.body, d.headers)).to.not.throw();
  });

  it('webhooks: a receiver that never answers is retried, for a bounded time, and then given up', async () => {
    // Every event was attempted, and retried (2 s timeout, retries after 2, 4, 8 s): more
    // connections than events...
    const events = streams[0]!.events.length;
    expect(hole.connections()).to.be.above(events);
    // ...but within the 12 s bound: after it, nothing more.
    await new Promise((resolve) => setTimeout(resolve, 16_000));
    const settled = hole.connections();
    await new Promise((resolve) => setTimeout(resolve, 6_000));
    expect(hole.connections()).to.equal(settled);
    const metrics = await new Promise<string>((resolve, reject) => {
      http
        .get({ host: '127.0.0.1', port, path: '/metrics' }, (res) => {
          let text = '';
          res.on('data', (c: Buffer) => (text += c.toString()));
          res.on('end', () => resolve(text));
        })
        .on('error', reject);
    });
    const given = new RegExp(
      `wg_peerd_webhook_given_up_total\\{target="${hole.url}"\\} (\\d+)`,
    ).exec(metrics);
    expect(Number(given?.[1])).to.equal(events);
    expect(metrics).to.match(
      new RegExp(
        `wg_peerd_webhook_deliveries_total\\{target="${good.url}",outcome="success"\\} ${events}`,
      ),
    );
    expect(metrics).to.match(
      new RegExp(`wg_peerd_webhook_queue_depth\\{target="${hole.url}"\\} 0`),
    );
    expect(metrics).to.match(/wg_peerd_events_total\{type="peer.cap_exhausted"\} 1/);
    expect(metrics).to.match(/wg_peerd_event_streams 2/);
  });
});
