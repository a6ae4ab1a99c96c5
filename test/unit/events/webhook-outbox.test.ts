/**
 * Webhook delivery with a state dir is at least once (issue 30: "pending deliveries are an outbox
 * in the state dir: a restart, a crash or a reboot delivers every pending event once more (at
 * least once, same webhook-id)"; done-when 2, without the VM). A receiver that is down while the
 * daemon is stopped (the SIGTERM path), killed (kill -9: MemoryFs.killed(), the page cache kept)
 * and loses its power (MemoryFs.crashed()/crashState(): the states ALICE lists) gets every event
 * published before and during the outage once it is back, each verified by the
 * `standardwebhooks` library as a receiver would, and a duplicate only ever with the same
 * webhook-id and body.
 */
import { expect } from 'chai';
import fc from 'fast-check';
import { Registry } from 'prom-client';
import sinon from 'sinon';
import { Webhook } from 'standardwebhooks';
import {
  EventHub,
  Webhooks,
  createEventMetrics,
  outboxKeyOf,
  type DeliveryOutbox,
  type DeliveryPolicy,
  type StoredEvent,
  type WebhookTarget,
} from '../../../src/events';
import type { Send } from '../../../src/events/webhooks';
import { Outbox, decodeOutbox } from '../../../src/state';
import { MemoryFs, pickFrom, seeded } from '../../support/memory-fs';

const T0 = Date.parse('2026-03-01T12:00:00.000Z');
const DIR = '/var/lib/wg-peerd/wg0';
const FILE = `${DIR}/outbox`;
const SECRET = `whsec_${Buffer.alloc(32, 9).toString('base64')}`;
const NEW_SECRET = `whsec_${Buffer.alloc(32, 7).toString('base64')}`;
const URL_WITH_TOKEN = 'https://hooks.example/in?token=q5ecretQuery';
const MINUTE = 60_000;

interface Arrival {
  id: string;
  body: string;
  /** What `new Webhook(secret).verify` said at receipt: the payload, or why it refused. */
  verified: { ok: true } | { ok: false; why: string };
}

/** A receiver that is up or down; it checks each signature as it arrives, with the clock of then. */
class Receiver {
  up = true;
  secret = SECRET;
  readonly arrivals: Arrival[] = [];

  /** The sender of one daemon process: once it is gone, nothing it started reaches anybody. */
  sendFor(alive: () => boolean): Send {
    return (request) => {
      if (!alive()) return Promise.reject(new Error('the process is gone'));
      if (!this.up) {
        return Promise.reject(
          Object.assign(new Error('fetch failed'), { cause: { code: 'ECONNREFUSED' } }),
        );
      }
      let verified: Arrival['verified'];
      try {
        new Webhook(this.secret).verify(request.body, request.headers);
        verified = { ok: true };
      } catch (error) {
        verified = { ok: false, why: (error as Error).message };
      }
      this.arrivals.push({ id: request.headers['webhook-id']!, body: request.body, verified });
      return Promise.resolve(204);
    };
  }

  ids(): Set<string> {
    return new Set(this.arrivals.map((a) => a.id));
  }
}

interface Log {
  warnings: Array<Record<string, unknown>>;
  infos: Array<Record<string, unknown>>;
}

/** One daemon process: its outbox over `fs`, a hub of its own run, its webhooks. */
async function start(
  fs: MemoryFs,
  receiver: Receiver,
  run: string,
  options: {
    policy?: Partial<DeliveryPolicy>;
    targets?: WebhookTarget[];
    registry?: Registry;
    wrap?: (outbox: DeliveryOutbox) => DeliveryOutbox;
    /** Wraps the process's sender (to look at the disk at each attempt). */
    send?: (send: Send) => Send;
  } = {},
) {
  fs.putDirs(DIR);
  const { outbox } = await Outbox.open(fs, FILE);
  const hub = new EventHub({ interfaceName: 'wg0', historySize: 1000, run });
  let alive = true;
  const log: Log = { warnings: [], infos: [] };
  const counts = { dropped: 0, gaveUp: 0, writeFailed: 0 };
  let webhooks: Webhooks | null = null;
  const metrics = options.registry
    ? createEventMetrics(options.registry, { outbox: () => webhooks!.outboxDepths() })
    : null;
  webhooks = new Webhooks(hub, {
    policy: { concurrency: 1, ...options.policy },
    logger: { info: (o) => log.infos.push(o), warn: (o) => log.warnings.push(o) },
    observer: {
      attempt: (target, outcome) => metrics?.webhooks.attempt(target, outcome),
      gaveUp: (target) => {
        counts.gaveUp++;
        metrics?.webhooks.gaveUp(target);
      },
      dropped: (target) => {
        counts.dropped++;
        metrics?.webhooks.dropped(target);
      },
      queueDepth: (target, depth) => metrics?.webhooks.queueDepth(target, depth),
      removed: (target) => metrics?.webhooks.removed(target),
      outboxWriteFailed: (target) => {
        counts.writeFailed++;
        metrics?.webhooks.outboxWriteFailed?.(target);
      },
    },
    outbox: options.wrap ? options.wrap(outbox) : outbox,
    send: (options.send ?? ((send) => send))(receiver.sendFor(() => alive)),
  });
  webhooks.setTargets(options.targets ?? [{ url: URL_WITH_TOKEN, secret: SECRET, types: null }]);
  const published: StoredEvent[] = [];
  const daemon = {
    fs,
    hub,
    webhooks,
    outbox,
    log,
    counts,
    published,
    publish(n = 1): StoredEvent[] {
      const events: StoredEvent[] = [];
      for (let i = 0; i < n; i++) {
        events.push(
          hub.publish({
            type: 'peer.cap_exhausted',
            publicKey: `key-${run}-${i}`,
            ipAddress: '10.8.0.2',
            details: { quotaBytes: 1000, usedBytes: 1000 + i },
          }),
        );
      }
      published.push(...events);
      return events;
    },
    /** SIGTERM: stop delivering, let the outbox finish its writes, close it. */
    async stop(): Promise<void> {
      webhooks!.close();
      await outbox.close();
      alive = false;
    },
    /** kill -9 or a power cut: the process is gone at once (its disk is what the test takes). */
    kill(): void {
      alive = false;
      webhooks!.close();
    },
  };
  return daemon;
}

/** Every published event arrived, verified, and each id always with its own body. */
function expectAllArrived(receiver: Receiver, published: readonly StoredEvent[]): void {
  const bodies = new Map(published.map((e) => [e.id, e.json]));
  for (const arrival of receiver.arrivals) {
    expect(arrival.verified, `signature of ${arrival.id}`).to.deep.equal({ ok: true });
    expect(bodies.has(arrival.id), `${arrival.id} was published`).to.equal(true);
    expect(arrival.body, `body of ${arrival.id}`).to.equal(bodies.get(arrival.id));
  }
  const missing = published.map((e) => e.id).filter((id) => !receiver.ids().has(id));
  expect(missing, 'events that never arrived').to.deep.equal([]);
}

describe('events: webhook outbox, at-least-once delivery across restarts and crashes (issue 30)', () => {
  let clock: sinon.SinonFakeTimers;
  beforeEach(() => {
    clock = sinon.useFakeTimers({
      now: T0,
      toFake: ['setTimeout', 'clearTimeout', 'setInterval', 'clearInterval', 'Date'],
    });
  });
  afterEach(() => clock.restore());

  it('a receiver down through a SIGTERM restart, a kill -9 and a power cut gets every event once it is back, verified, duplicates only with the same webhook-id', async () => {
    const receiver = new Receiver();
    const all: StoredEvent[] = [];
    let d = await start(new MemoryFs(), receiver, 'runa');
    all.push(...d.publish(1));
    await clock.tickAsync(0);
    expect(receiver.ids()).to.deep.equal(new Set([all[0]!.id]));

    receiver.up = false;
    all.push(...d.publish(3));
    await clock.tickAsync(2 * MINUTE);
    // SIGTERM, then the host reboots: only what was synced survives.
    await d.stop();
    d = await start(d.fs.crashed(), receiver, 'runb');
    all.push(...d.publish(2));
    await clock.tickAsync(2 * MINUTE);
    // kill -9: the page cache outlives the process.
    d.kill();
    d = await start(d.fs.killed(), receiver, 'runc');
    all.push(...d.publish(2));
    await clock.tickAsync(MINUTE);
    // The power goes: the least a reboot may find.
    d.kill();
    d = await start(d.fs.crashed(), receiver, 'rund');
    expect(d.outbox.pending().map((e) => e.id)).to.deep.equal(all.slice(1).map((e) => e.id));
    all.push(...d.publish(1));
    await clock.tickAsync(MINUTE);
    expect(receiver.arrivals).to.have.length(1);

    receiver.up = true;
    await clock.tickAsync(2 * 60 * MINUTE);
    expectAllArrived(receiver, all);
    // The event answered before the outage never comes again; the others keep their first run's ids.
    expect(receiver.arrivals.filter((a) => a.id === all[0]!.id)).to.have.length(1);
    expect(receiver.ids().has('runa.2')).to.equal(true);
    expect(d.outbox.pending()).to.deep.equal([]);
    const restored = d.log.infos.find((o) => o['event'] === 'webhook_outbox_restored');
    expect(restored).to.include({ pending: all.length - 2 });
  });

  it('has each event on disk before its first attempt, and takes it out once answered 2xx', async () => {
    const receiver = new Receiver();
    const fs = new MemoryFs();
    const onDiskAtAttempt: boolean[] = [];
    // What a power cut would leave at the instant of each attempt.
    const d = await start(fs, receiver, 'runa', {
      send: (send) => (request) => {
        const records = decodeOutbox(fs.crashed().files.get(FILE)!.data).records;
        const id = request.headers['webhook-id'];
        onDiskAtAttempt.push(records.some((r) => r.t === 'add' && r.id === id));
        return send(request);
      },
    });
    d.publish(3);
    await clock.tickAsync(0);
    expect(onDiskAtAttempt).to.deep.equal([true, true, true]);
    expect(d.outbox.pending()).to.deep.equal([]);
    await d.stop();
    const again = await start(fs.crashed(), receiver, 'runb');
    await clock.tickAsync(MINUTE);
    expect(receiver.arrivals).to.have.length(3);
    expect(again.outbox.pending()).to.deep.equal([]);
  });

  it('keeps the original retry deadline across a restart: gives up --webhook-retry-for after the event was queued, logged and counted', async () => {
    const receiver = new Receiver();
    receiver.up = false;
    const policy = { giveUpAfterMs: 60 * MINUTE, maxDelayMs: 5 * MINUTE, jitter: 0 };
    let d = await start(new MemoryFs(), receiver, 'runa', { policy });
    d.publish(1);
    await clock.tickAsync(40 * MINUTE);
    expect(d.counts.gaveUp).to.equal(0);
    await d.stop();
    d = await start(d.fs.crashed(), receiver, 'runb', { policy });
    await clock.tickAsync(10 * MINUTE);
    expect(d.counts.gaveUp).to.equal(0);
    // By T0 + 61 min; a window counted from the restart would run until T0 + 100 min.
    await clock.tickAsync(11 * MINUTE);
    expect(d.counts.gaveUp).to.equal(1);
    expect(d.log.warnings.map((o) => o['event'])).to.include('webhook_given_up');
    expect(d.outbox.pending()).to.deep.equal([]);
    receiver.up = true;
    await d.stop();
    await start(d.fs.crashed(), receiver, 'runc', { policy });
    await clock.tickAsync(MINUTE);
    expect(receiver.arrivals).to.deep.equal([]);
  });

  it('keeps at most the queue bound per target: at start the oldest are kept, the rest dropped, logged and counted, and taken out of the outbox', async () => {
    const receiver = new Receiver();
    receiver.up = false;
    let d = await start(new MemoryFs(), receiver, 'runa', { policy: { queueSize: 8 } });
    const events = d.publish(8);
    await clock.tickAsync(0);
    await d.stop();
    d = await start(d.fs.crashed(), receiver, 'runb', { policy: { queueSize: 5 } });
    expect(d.counts.dropped).to.equal(3);
    const warning = d.log.warnings.find((o) => o['event'] === 'webhook_outbox_dropped');
    expect(warning).to.include({ dropped: 3, queueSize: 5 });
    expect(JSON.stringify(warning)).not.to.contain('q5ecretQuery');
    await clock.tickAsync(0);
    expect(d.outbox.pending().map((e) => e.id)).to.deep.equal(events.slice(0, 5).map((e) => e.id));
    // New events over the bound are dropped as without a state dir.
    d.publish(1);
    expect(d.counts.dropped).to.equal(4);
    receiver.up = true;
    await clock.tickAsync(30 * MINUTE);
    expect([...receiver.ids()]).to.have.members(events.slice(0, 5).map((e) => e.id));
  });

  it('delivers from memory when the outbox cannot be written: one warn line, every failure counted', async () => {
    const receiver = new Receiver();
    const fs = new MemoryFs();
    const d = await start(fs, receiver, 'runa');
    fs.fail('write', 'EIO', { path: 'outbox', times: Number.POSITIVE_INFINITY });
    const events = d.publish(3);
    await clock.tickAsync(0);
    expect([...receiver.ids()]).to.deep.equal(events.map((e) => e.id));
    expect(d.counts.writeFailed).to.equal(3);
    const failed = d.log.warnings.filter((o) => o['event'] === 'webhook_outbox_write_failed');
    expect(failed).to.have.length(1);
    expect(failed[0]).to.include({ reason: 'EIO: injected: write /var/lib/wg-peerd/wg0/outbox' });
  });

  it('names neither the URL, its query nor the secret in the outbox file; /metrics shows each target outbox depth and oldest age without the query', async () => {
    const receiver = new Receiver();
    receiver.up = false;
    const registry = new Registry();
    const fs = new MemoryFs();
    const d = await start(fs, receiver, 'runa', { registry });
    d.publish(2);
    await clock.tickAsync(90_000);
    const text = fs.text(FILE);
    expect(decodeOutbox(fs.files.get(FILE)!.data).records).to.have.length(2);
    expect(text).to.contain(outboxKeyOf(URL_WITH_TOKEN));
    for (const secret of ['hooks.example', 'q5ecretQuery', SECRET, SECRET.slice(6)]) {
      expect(text).not.to.contain(secret);
    }
    const metrics = await registry.metrics();
    expect(metrics).to.contain(
      'wg_peerd_webhook_outbox_depth{target="https://hooks.example/in"} 2',
    );
    expect(metrics).to.contain(
      'wg_peerd_webhook_outbox_oldest_age_seconds{target="https://hooks.example/in"} 90',
    );
    expect(metrics).not.to.contain('q5ecretQuery');
    receiver.up = true;
    await clock.tickAsync(10 * MINUTE);
    const after = await registry.metrics();
    expect(after).to.contain('wg_peerd_webhook_outbox_depth{target="https://hooks.example/in"} 0');
    expect(after).to.contain(
      'wg_peerd_webhook_outbox_oldest_age_seconds{target="https://hooks.example/in"} 0',
    );
  });

  it('SIGHUP: a target whose secret changes keeps its pending events (signed with the new secret); a removed target leaves the outbox', async () => {
    const receiver = new Receiver();
    receiver.up = false;
    const other = 'https://other.example/hook';
    const d = await start(new MemoryFs(), receiver, 'runa', {
      targets: [
        { url: URL_WITH_TOKEN, secret: SECRET, types: null },
        { url: other, secret: SECRET, types: null },
      ],
    });
    const events = d.publish(2);
    await clock.tickAsync(MINUTE);
    expect(d.outbox.pending()).to.have.length(4);
    d.webhooks.setTargets([{ url: URL_WITH_TOKEN, secret: NEW_SECRET, types: null }]);
    await clock.tickAsync(0);
    expect(d.outbox.pending().map((e) => e.target)).to.deep.equal([
      outboxKeyOf(URL_WITH_TOKEN),
      outboxKeyOf(URL_WITH_TOKEN),
    ]);
    receiver.secret = NEW_SECRET;
    receiver.up = true;
    await clock.tickAsync(30 * MINUTE);
    expectAllArrived(receiver, events);
    expect(d.outbox.pending()).to.deep.equal([]);
  });

  it('a crash at a random instant into a random state, while the receiver flaps: every event whose outbox write was acknowledged arrives after the restart', async function () {
    this.timeout(120_000);
    clock.restore();
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.tuple(fc.integer({ min: 1, max: 3 }), fc.boolean()), {
          minLength: 1,
          maxLength: 8,
        }),
        fc.integer({ min: 0, max: 120 }),
        fc.integer(),
        async (steps, crashAt, seed) => {
          clock = sinon.useFakeTimers({
            now: T0,
            toFake: ['setTimeout', 'clearTimeout', 'setInterval', 'clearInterval', 'Date'],
          });
          try {
            const random = seeded(seed);
            const receiver = new Receiver();
            const fs = new MemoryFs();
            const acked = new Set<string>();
            let ackedAtCrash: Set<string> | null = null;
            const d = await start(fs, receiver, 'runa', {
              wrap: (outbox) => ({
                pending: () => outbox.pending(),
                stats: () => outbox.stats(),
                remove: (target, id) => outbox.remove(target, id),
                add: (entry) => outbox.add(entry).then(() => void acked.add(entry.id)),
              }),
            });
            fs.crashBefore(crashAt, pickFrom(random), () => (ackedAtCrash = new Set(acked)));
            for (const [count, up] of steps) {
              receiver.up = up;
              d.publish(count);
              await clock.tickAsync(Math.floor(random() * 20_000));
            }
            const image = fs.crash ?? fs.crashState(random);
            const mustArrive = ackedAtCrash ?? acked;
            d.kill();
            receiver.up = true;
            const again = await start(image, receiver, 'runb');
            await clock.tickAsync(2 * 60 * MINUTE);
            const published = new Map(d.published.map((e) => [e.id, e.json]));
            for (const arrival of receiver.arrivals) {
              expect(arrival.verified).to.deep.equal({ ok: true });
              expect(arrival.body).to.equal(published.get(arrival.id));
            }
            for (const id of mustArrive) expect(receiver.ids().has(id), id).to.equal(true);
            expect(again.outbox.pending()).to.deep.equal([]);
          } finally {
            clock.restore();
          }
        },
      ),
      { numRuns: 60 },
    );
    clock = sinon.useFakeTimers({ now: T0, toFake: ['Date'] });
  });
});
