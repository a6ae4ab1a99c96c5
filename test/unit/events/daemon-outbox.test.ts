/**
 * The whole daemon's webhook outbox (issue 30, done-when 2 without the VM): started with
 * --state-dir over the crash-state file system double and --webhooks-file naming a real HTTP
 * receiver on loopback that answers 503 (down), peers are created through the API; the daemon is
 * stopped (the SIGTERM path) and the host rebooted, then killed (kill -9: the page cache kept);
 * once the receiver answers 2xx, every peer.created arrives, each verified by the
 * `standardwebhooks` library, a duplicate only with the same webhook-id and body.
 */
import { expect } from 'chai';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Webhook } from 'standardwebhooks';
import { startDaemon, type Daemon } from '../../../src/main';
import type { ReadTokenFile } from '../../../src/token-files';
import { MemoryFs } from '../../support/memory-fs';
import { httpCall } from '../../support/http-call';
import { FakeKernel } from '../support/fake-kernel';
import { testConfig } from '../support/config';
import { captureLog } from '../support/log-capture';

const SECRET = `whsec_${Buffer.alloc(32, 5).toString('base64')}`;
const STATE_DIR = '/var/lib/wg-peerd';
const WEBHOOKS_FILE = '/etc/wg-peerd/webhooks';

interface Arrival {
  id: string;
  body: string;
  verified: boolean;
}

/** A receiver on loopback: 503 while down, 204 while up; it verifies each request as it comes. */
async function receiver() {
  const state = { up: false, arrivals: [] as Arrival[] };
  const server = http.createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (chunk: string) => (body += chunk));
    req.on('end', () => {
      if (!state.up) {
        res.writeHead(503).end();
        return;
      }
      const headers = Object.fromEntries(
        Object.entries(req.headers).map(([name, value]) => [name, String(value)]),
      );
      let verified = true;
      try {
        new Webhook(SECRET).verify(body, headers);
      } catch {
        verified = false;
      }
      state.arrivals.push({ id: headers['webhook-id']!, body, verified });
      res.writeHead(204).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  return { state, port, close: () => new Promise((resolve) => server.close(resolve)) };
}

async function until(what: string, done: () => boolean, ms = 5000): Promise<void> {
  const end = Date.now() + ms;
  while (!done()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

describe('daemon: the webhook outbox across a SIGTERM, a reboot and a kill -9 (issue 30)', function () {
  this.timeout(20_000);

  it('delivers every peer.created published while the receiver was down once it is back, verified, duplicates only with the same webhook-id', async () => {
    const hook = await receiver();
    const read: ReadTokenFile = () => ({
      text: `http://127.0.0.1:${hook.port}/hook?token=query-secret ${SECRET}\n`,
      mode: 0o100600,
    });
    const log = captureLog();
    const start = (fs: MemoryFs, kernel: FakeKernel, bootId: string): Promise<Daemon> =>
      startDaemon(testConfig({ stateDir: STATE_DIR, webhooksFile: WEBHOOKS_FILE }), {
        openKernel: async () => kernel,
        logger: log.logger,
        readTokenFile: read,
        readBootId: async () => bootId,
        stateFs: fs,
        webhookPolicy: { firstRetryMs: 20, maxDelayMs: 100, jitter: 0 },
      });
    const created: string[] = [];
    const create = async (daemon: Daemon): Promise<void> => {
      const reply = await httpCall(daemon.address.port, 'POST', '/api/peer');
      expect(reply.status).to.equal(201);
      created.push(reply.json<{ peer: { publicKey: string } }>().peer.publicKey);
    };
    const fs = new MemoryFs();
    let daemon = await start(fs, new FakeKernel(), 'boot-1');
    try {
      await create(daemon);
      await create(daemon);
      await new Promise((resolve) => setTimeout(resolve, 150)); // a few refused attempts
      await daemon.shutdown(); // SIGTERM
      const rebooted = fs.crashed(); // then the power goes: only what was synced is there
      daemon = await start(rebooted, new FakeKernel(), 'boot-2');
      await create(daemon);
      await new Promise((resolve) => setTimeout(resolve, 150));
      const killed = rebooted.killed(); // kill -9: the page cache outlives the process
      await daemon.shutdown(); // (the process is gone; its later writes go to the old disk)
      daemon = await start(killed, new FakeKernel(), 'boot-2');
      await create(daemon);
      hook.state.up = true;
      const arrivedFor = (key: string): boolean =>
        hook.state.arrivals.some((a) => {
          const body = JSON.parse(a.body) as { type: string; public_key?: string };
          return body.type === 'peer.created' && body.public_key === key;
        });
      await until('every peer.created', () => created.every(arrivedFor));
      expect(hook.state.arrivals.every((a) => a.verified)).to.equal(true);
      const bodies = new Map<string, string>();
      for (const arrival of hook.state.arrivals) {
        expect(bodies.get(arrival.id) ?? arrival.body, arrival.id).to.equal(arrival.body);
        bodies.set(arrival.id, arrival.body);
      }
      const metrics = (await httpCall(daemon.address.port, 'GET', '/metrics')).text;
      expect(metrics).to.match(
        /^wg_peerd_webhook_outbox_depth\{target="http:\/\/127\.0\.0\.1:\d+\/hook"\} \d+$/m,
      );
      expect(metrics).not.to.contain('query-secret');
      expect(log.text()).not.to.contain('query-secret').and.not.contain(SECRET.slice(6));
    } finally {
      await daemon.shutdown();
      await hook.close();
    }
  });
});
