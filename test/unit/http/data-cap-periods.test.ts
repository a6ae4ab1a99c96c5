/**
 * PATCH .../data-cap with billing periods (issue 19, DESIGN §3 "Plans on a data cap"): validation
 * (400 with details, nothing asked of the kernel's writes), PATCH semantics (a field left out
 * keeps its value, period null ends it, usage kept), the list's plan fields, and the resets the
 * service makes on a fake clock (on time, and late at a start), with their event and log line.
 */
import { expect } from 'chai';
import request from 'supertest';
import { createApp } from '../../../src/http/app';
import { PeerService, type PeerChange } from '../../../src/peers';
import { FakeKernel } from '../support/fake-kernel';
import { captureLog } from '../support/log-capture';
import { ManualClock } from '../support/manual-clock';
import { NOW, expectError, key, setup, urlSafe } from './helpers';
import { withoutReadAt } from '../../support/peer-list';

const DAY = 86_400_000;

function withPeer() {
  const s = setup();
  s.kernel.putPeer(key(1), ['10.8.0.2/32']);
  return { ...s, path: `/api/peer/${urlSafe(key(1))}/data-cap` };
}

async function listedCap(http: ReturnType<typeof setup>['http']) {
  return withoutReadAt((await http.get('/api/peers')).body.peers[0].data_cap);
}

describe('http data cap billing periods (PATCH /api/peer/<publicKey>/data-cap)', () => {
  describe('validation: 400 with details, no kernel write', () => {
    const cases: Array<[string, Record<string, unknown>, string]> = [
      ['an unknown period', { quotaBytes: 5000, period: 'year' }, '/period'],
      ['a period of another type', { quotaBytes: 5000, period: 30 }, '/period'],
      [
        'a start without an offset',
        { quotaBytes: 5000, period: 'day', periodStart: '2026-03-01T00:00:00' },
        '/periodStart',
      ],
      [
        'a date without a time',
        { quotaBytes: 5000, period: 'day', periodStart: '2026-03-01' },
        '/periodStart',
      ],
      [
        'an impossible date',
        { quotaBytes: 5000, period: 'month', periodStart: '2026-02-30T00:00:00Z' },
        '/periodStart',
      ],
      ['a period without a cap', { period: 'month' }, '/period'],
      ['a start without a cap', { periodStart: '2026-03-01T00:00:00Z' }, '/period'],
      ['an empty body for a peer without a cap', {}, '/quotaBytes'],
      [
        'a start without a period',
        { quotaBytes: 5000, periodStart: '2026-03-01T00:00:00Z' },
        '/periodStart',
      ],
    ];
    for (const [what, body, field] of cases) {
      it(`answers 400 for ${what}`, async () => {
        const { kernel, http, path } = withPeer();
        const res = await http.patch(path).send(body);
        expectError(res, 400, 'VALIDATION_FAILED');
        expect(res.body.details.map((d: { field: string }) => d.field)).to.include(field);
        expect(kernel.count('quota.setCap')).to.equal(0);
        expect(await listedCap(http)).to.equal(null);
      });
    }

    it('answers 400 for a start without a period on a cap that has none, keeping the cap', async () => {
      const { kernel, http, path } = withPeer();
      await http.patch(path).send({ quotaBytes: 5000 });
      const res = await http.patch(path).send({ periodStart: '2026-03-01T00:00:00Z' });
      expectError(res, 400, 'VALIDATION_FAILED');
      expect(kernel.count('quota.setCap')).to.equal(1);
      expect((await listedCap(http)).period).to.equal(null);
    });
  });

  describe('PATCH semantics', () => {
    it('sets a monthly period from a start with an offset, listed with the next reset in UTC', async () => {
      const { http, path } = withPeer();
      const res = await http
        .patch(path)
        .send({ quotaBytes: 10_000, period: 'month', periodStart: '2026-01-31T09:30:00+02:00' });
      expect(res.status, JSON.stringify(res.body)).to.equal(200);
      // NOW is 2026-03-01T12:00Z: the resets fell on Feb 28 and fall next on Mar 31, 07:30 UTC.
      expect(await listedCap(http)).to.deep.equal({
        quota_bytes: 10_000,
        used_bytes: 0,
        enforced: true,
        period: 'month',
        period_start: '2026-01-31T09:30:00.000+02:00',
        next_reset: '2026-03-31T07:30:00.000Z',
        previous_period_used_bytes: null,
        after_cap: 'block',
        throttle_bytes_per_second: null,
        exhausted_at: null,
        throttled: false,
      });
    });

    it('defaults the start to the time of the request', async () => {
      const { http, path } = withPeer();
      await http.patch(path).send({ quotaBytes: 10_000, period: 'week' });
      const cap = await listedCap(http);
      expect(cap.period_start).to.equal(new Date(NOW).toISOString());
      expect(cap.next_reset).to.equal(new Date(NOW + 7 * DAY).toISOString());
    });

    it('keeps the period when only the cap changes, and the cap when only the period changes', async () => {
      const { kernel, http, path } = withPeer();
      await http
        .patch(path)
        .send({ quotaBytes: 10_000, period: 'day', periodStart: '2026-03-01T06:00:00Z' });
      kernel.setUsed('10.8.0.2', 4_000);
      expect((await http.patch(path).send({ quotaBytes: 20_000 })).status).to.equal(200);
      let cap = await listedCap(http);
      expect(cap).to.include({ quota_bytes: 20_000, used_bytes: 4_000, period: 'day' });
      expect(cap.period_start).to.equal('2026-03-01T06:00:00.000Z');
      expect((await http.patch(path).send({ period: 'week' })).status).to.equal(200);
      cap = await listedCap(http);
      expect(cap).to.include({ quota_bytes: 20_000, used_bytes: 4_000, period: 'week' });
      expect(cap.period_start).to.equal('2026-03-01T06:00:00.000Z');
    });

    it('ends the period with "period": null, keeping cap and usage', async () => {
      const { kernel, http, path } = withPeer();
      await http.patch(path).send({ quotaBytes: 10_000, period: 'day' });
      kernel.setUsed('10.8.0.2', 777);
      expect((await http.patch(path).send({ period: null })).status).to.equal(200);
      expect(await listedCap(http)).to.include({
        quota_bytes: 10_000,
        used_bytes: 777,
        period: null,
        period_start: null,
        next_reset: null,
      });
    });

    it('passes the kernel the plan only when the body names period or periodStart', async () => {
      const { kernel, http, path } = withPeer();
      await http.patch(path).send({ quotaBytes: 10_000 });
      await http.patch(path).send({ quotaBytes: 10_000, period: 'day' });
      const calls = kernel.calls.filter((c) => c.method === 'quota.setCap').map((c) => c.args[3]);
      expect(calls[0]).to.equal(undefined);
      expect(calls[1]).to.include({ period: 'day' });
    });
  });
});

describe('billing-period resets made by the service (fake kernel, fake clock)', () => {
  function service(kernel: FakeKernel, clock: ManualClock) {
    const log = captureLog();
    const changes: PeerChange[] = [];
    let resets = 0;
    const svc = new PeerService({
      kernel,
      interfaceName: 'wg0',
      endpointHost: 'vpn.example.net',
      logger: log.logger,
      now: () => clock.time,
      periodClock: clock,
      events: { publish: (change) => changes.push(change) },
      onPeriodReset: () => (resets += 1),
    });
    const http = request(createApp({ service: svc, tokens: null, logger: log.logger }));
    return { svc, log, changes, http, resets: () => resets };
  }

  it('a period reset of a cap that throttles ends the throttling and keeps the rate', async () => {
    const kernel = FakeKernel.withInterface();
    kernel.putPeer(key(1), ['10.8.0.2/32']);
    const clock = new ManualClock(Date.parse('2026-03-01T23:59:00Z'));
    const { http } = service(kernel, clock);
    const path = `/api/peer/${urlSafe(key(1))}/data-cap`;
    const body = { quotaBytes: 10_000, afterCap: 'throttle', throttleBytesPerSecond: 5000 };
    await http.patch(path).send({ ...body, period: 'day', periodStart: '2026-03-01T00:00:00Z' });
    kernel.setUsed('10.8.0.2', 10_000);
    await clock.runAt(Date.parse('2026-03-01T23:59:59.999Z'));
    expect(await listedCap(http)).to.include({ throttled: true, throttle_bytes_per_second: 5000 });
    await clock.runAt(Date.parse('2026-03-02T00:00:00Z'));
    expect(await listedCap(http)).to.include({
      used_bytes: 0,
      previous_period_used_bytes: 10_000,
      after_cap: 'throttle',
      throttle_bytes_per_second: 5000,
      exhausted_at: null,
      throttled: false,
    });
  });

  it('resets at the boundary: usage zeroed, the closing usage kept, peer.cap_reset published', async () => {
    const kernel = FakeKernel.withInterface();
    kernel.putPeer(key(1), ['10.8.0.2/32']);
    const clock = new ManualClock(Date.parse('2026-03-01T23:59:00Z'));
    const { http, changes, log, resets } = service(kernel, clock);
    const path = `/api/peer/${urlSafe(key(1))}/data-cap`;
    await http
      .patch(path)
      .send({ quotaBytes: 10_000, period: 'day', periodStart: '2026-03-01T00:00:00Z' });
    kernel.setUsed('10.8.0.2', 10_000);
    await clock.runAt(Date.parse('2026-03-01T23:59:59.999Z'));
    expect((await listedCap(http)).used_bytes).to.equal(10_000);
    await clock.runAt(Date.parse('2026-03-02T00:00:00Z'));
    expect(await listedCap(http)).to.include({
      used_bytes: 0,
      previous_period_used_bytes: 10_000,
      next_reset: '2026-03-03T00:00:00.000Z',
    });
    expect(resets()).to.equal(1);
    const reset = changes.find((c) => c.type === 'peer.cap_reset');
    expect(reset?.details).to.deep.include({
      origin: 'period',
      used_bytes: 10_000,
      period: 'day',
      due: '2026-03-02T00:00:00.000Z',
    });
    expect(log.lines().find((l) => l['event'] === 'data_cap_period_reset')?.['level']).to.equal(30);
    // Nothing more until the next boundary.
    await clock.runAt(Date.parse('2026-03-02T12:00:00Z'));
    expect(resets()).to.equal(1);
  });

  it('makes at start, once, a reset that fell due while no daemon ran, and logs it at warn', async () => {
    const kernel = FakeKernel.withInterface();
    kernel.putPeer(key(1), ['10.8.0.2/32']);
    const first = new ManualClock(Date.parse('2026-03-01T10:00:00Z'));
    await service(kernel, first)
      .http.patch(`/api/peer/${urlSafe(key(1))}/data-cap`)
      .send({
        quotaBytes: 10_000,
        period: 'day',
        periodStart: '2026-03-01T00:00:00+01:00',
      });
    kernel.setUsed('10.8.0.2', 6_000);
    // A new daemon two days later: the kernel kept the plan.
    const clock = new ManualClock(Date.parse('2026-03-03T10:00:00Z'));
    const { svc, http, log, resets } = service(kernel, clock);
    await svc.startPeriods();
    await clock.runAt(clock.time);
    expect(resets()).to.equal(1);
    expect(await listedCap(http)).to.include({
      used_bytes: 0,
      previous_period_used_bytes: 6_000,
      next_reset: '2026-03-03T23:00:00.000Z',
    });
    const late = log.lines().find((l) => l['event'] === 'data_cap_period_reset');
    expect(late).to.include({ level: 40, due: '2026-03-02T23:00:00.000Z' });
    expect(String(late?.['msg'])).to.contain('made late');
    await clock.runAt(clock.time + 1000);
    expect(resets()).to.equal(1);
  });
});
