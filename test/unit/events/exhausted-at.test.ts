/**
 * The list's data_cap.exhausted_at (issue 19) end to end over the fake kernel, wired as the
 * daemon wires it: the events room's latch as the service's port (every fresh shared read), the
 * kernel's notice through `capExhausted`, the daemon's own resets through the change sink, and
 * each list response checked against the list's response schema.
 */
import { expect } from 'chai';
import Ajv2020 from 'ajv/dist/2020';
import request from 'supertest';
import { Events } from '../../../src/events';
import { createApp } from '../../../src/http/app';
import { listResponse } from '../../../src/http/schemas';
import { PeerService, type KnownExhaustion, type PeerSnapshot } from '../../../src/peers';
import { FakeKernel } from '../support/fake-kernel';
import { captureLog } from '../support/log-capture';

const T0 = Date.parse('2026-03-01T12:00:00.000Z');
const QUOTA = 1_000_000;
const validList = new Ajv2020({ strict: false, validateFormats: false }).compile(listResponse);

function wired(options: { exhaustions?: KnownExhaustion[] } = {}) {
  const kernel = FakeKernel.withInterface();
  const log = captureLog();
  const clock = { now: T0 };
  const kept: unknown[] = [];
  const events: Events = new Events({
    interfaceName: 'wg0',
    historySize: 100,
    snapshot: (): Promise<PeerSnapshot> => service.snapshot(),
    listMaxAgeMs: 1000,
    logger: log.logger,
    now: () => clock.now,
    exhaustions: options.exhaustions,
    keepExhaustion: (publicKey, time) => kept.push([publicKey, time]),
  });
  const service: PeerService = new PeerService({
    kernel,
    interfaceName: 'wg0',
    endpointHost: 'vpn.example.net',
    logger: log.logger,
    now: () => clock.now,
    events: events.sink,
    exhaustion: events.exhaustionTimes,
  });
  const http = request(createApp({ service, tokens: null, logger: log.logger }));
  /** The peer's data_cap as GET /api/peers lists it (a fresh read: no window here). */
  const listed = async (): Promise<Record<string, unknown>> => {
    const res = await http.get('/api/peers');
    expect(res.status).to.equal(200);
    expect(validList(res.body), JSON.stringify(validList.errors)).to.equal(true);
    return res.body.peers[0].data_cap;
  };
  const notice = (address: string, publicKey: string): void =>
    events.capExhausted({ address, publicKey, quotaBytes: QUOTA, usedBytes: QUOTA });
  return { kernel, events, service, http, clock, listed, notice, kept };
}

async function cappedPeer(w: ReturnType<typeof wired>) {
  const created = await w.service.createPeer();
  await w.service.setDataCap(created.publicKey, QUOTA);
  return {
    key: created.publicKey,
    ip: created.ip,
    path: `/api/peer/${encodeURIComponent(created.publicKey)}`,
  };
}

/**
 * A capped peer, listed once (the run's first read, with room), then used up and told by the
 * kernel's notice at `at`.
 */
async function exhaustedByNotice(w: ReturnType<typeof wired>, at = T0 + 1_000) {
  const peer = await cappedPeer(w);
  await w.listed();
  w.kernel.setUsed(peer.ip, QUOTA);
  w.clock.now = at;
  w.notice(peer.ip, peer.key);
  return peer;
}

const iso = (ms: number): string => new Date(ms).toISOString();

describe('list data_cap.exhausted_at: when the daemon learned that the cap ran out', () => {
  it("is the kernel's notice's time, listed by a read made seconds later (no poll, no stream)", async () => {
    const w = wired();
    const peer = await cappedPeer(w);
    expect(await w.listed()).to.include({ exhausted_at: null });
    w.clock.now = T0 + 1_000;
    w.kernel.setUsed(peer.ip, QUOTA);
    w.notice(peer.ip, peer.key);
    w.clock.now = T0 + 4_000;
    expect(await w.listed()).to.include({ used_bytes: QUOTA, exhausted_at: iso(T0 + 1_000) });
    w.events.close();
  });

  it('is the first read that found the cap used up where the notice is held back (6.12); the late notice keeps it', async () => {
    const w = wired();
    const peer = await cappedPeer(w);
    await w.listed();
    w.kernel.setUsed(peer.ip, QUOTA);
    w.clock.now = T0 + 2_000;
    expect(await w.listed()).to.include({ exhausted_at: iso(T0 + 2_000) });
    w.clock.now = T0 + 60_000;
    w.notice(peer.ip, peer.key);
    expect(await w.listed()).to.include({ exhausted_at: iso(T0 + 2_000) });
    w.events.close();
  });

  it('is null after POST .../data-cap/reset at once, and a new exhaustion gets a new time', async () => {
    const w = wired();
    const peer = await exhaustedByNotice(w);
    w.clock.now = T0 + 2_000;
    expect((await w.http.post(`${peer.path}/data-cap/reset`)).status).to.equal(200);
    expect(await w.listed()).to.include({ used_bytes: 0, exhausted_at: null });
    // Used up again, told by the kernel with no read between the reset and the cut.
    w.clock.now = T0 + 3_000;
    w.kernel.setUsed(peer.ip, QUOTA);
    w.notice(peer.ip, peer.key);
    w.clock.now = T0 + 5_000;
    expect(await w.listed()).to.include({ exhausted_at: iso(T0 + 3_000) });
    w.events.close();
  });

  it('is null after a raise above the usage; kept by a PATCH to as many bytes', async () => {
    const w = wired();
    const peer = await exhaustedByNotice(w);
    await w.http.patch(`${peer.path}/data-cap`).send({ quotaBytes: QUOTA, period: 'month' });
    expect(await w.listed()).to.include({ exhausted_at: iso(T0 + 1_000) });
    await w.http.patch(`${peer.path}/data-cap`).send({ quotaBytes: 2 * QUOTA });
    expect(await w.listed()).to.include({ quota_bytes: 2 * QUOTA, exhausted_at: null });
    w.events.close();
  });

  it('is forgotten with the cap removed and with the peer deleted (a new cap there starts afresh)', async () => {
    const w = wired();
    let peer = await exhaustedByNotice(w);
    expect((await w.http.delete(`${peer.path}/data-cap`)).status).to.equal(200);
    await w.service.setDataCap(peer.key, QUOTA);
    w.kernel.setUsed(peer.ip, QUOTA);
    expect(w.kept).to.deep.include([peer.key, null]);
    w.clock.now = T0 + 7_000;
    expect(await w.listed()).to.include({ exhausted_at: iso(T0 + 7_000) });
    await w.service.deletePeer(peer.key);
    peer = await cappedPeer(w);
    w.kernel.setUsed(peer.ip, QUOTA);
    w.clock.now = T0 + 9_000;
    expect(await w.listed()).to.include({ exhausted_at: iso(T0 + 9_000) });
    w.events.close();
  });

  it('is null for a cap the first read of this run found used up, unless the journal kept its time', async () => {
    const fresh = wired();
    const peer = await cappedPeer(fresh);
    fresh.kernel.setUsed(peer.ip, QUOTA);
    expect(await fresh.listed()).to.include({ used_bytes: QUOTA, exhausted_at: null });
    fresh.events.close();

    const kept = T0 - 3_600_000;
    const again = wired({
      exhaustions: [{ address: '10.8.0.2', publicKey: '', quotaBytes: QUOTA, at: kept }],
    });
    const second = await cappedPeer(again);
    expect(second.ip).to.equal('10.8.0.2');
    again.kernel.setUsed(second.ip, QUOTA);
    // A journal entry of another owner is not this peer's exhaustion.
    expect(await again.listed()).to.include({ exhausted_at: null });
    again.events.close();

    const third = wired();
    const owner = await cappedPeer(third);
    third.events.close();
    const restarted = wired({
      exhaustions: [{ address: owner.ip, publicKey: owner.key, quotaBytes: QUOTA, at: kept }],
    });
    restarted.kernel.putPeer(owner.key, [`${owner.ip}/32`]);
    await restarted.service.setDataCap(owner.key, QUOTA);
    restarted.kernel.setUsed(owner.ip, QUOTA);
    expect(await restarted.listed()).to.include({ exhausted_at: iso(kept) });
    restarted.events.close();
  });

  it('keeps each known time by the owner (what the daemon writes to the journal)', async () => {
    const w = wired();
    const peer = await exhaustedByNotice(w);
    await w.http.post(`${peer.path}/data-cap/reset`);
    expect(w.kept).to.deep.equal([
      [peer.key, { quotaBytes: QUOTA, at: T0 + 1_000 }],
      [peer.key, null],
    ]);
    w.events.close();
  });
});
