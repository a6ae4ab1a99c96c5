import { expect } from 'chai';
import { createHash } from 'node:crypto';
import { parseTokenText } from '../../../src/token-files';
import { encoded, key, setup } from './helpers';

const ADMIN = 'admin-token-0123456789abcdef';
const OTHER_ADMIN = 'another-admin-token-0123456789';
const READ = 'read-token-0123456789abcdef';

/** What an operator computes from a token to find its lines: `printf %s "$T" | sha256sum`. */
function fingerprintOf(token: string): string {
  return `sha256:${createHash('sha256').update(token).digest('hex').slice(0, 8)}`;
}

const CHANGE_EVENTS = [
  'peer_created',
  'speed_limit_set',
  'data_cap_set',
  'speed_limit_removed',
  'data_cap_removed',
  'peer_deleted',
];

/** Makes every kind of change through the API, each with its own X-Request-Id. */
async function everyChange(http: ReturnType<typeof setup>['http'], token: string) {
  const auth = { Authorization: `Bearer ${token}` };
  const created = await http.post('/api/peer').set(auth).set('X-Request-Id', 'req-create');
  expect(created.status).to.equal(201);
  const peer = `/api/peer/${encoded(created.body.peer.publicKey)}`;
  const calls = [
    http.patch(`${peer}/speed-limit`).send({ bytesPerSecond: 1000 }).set('X-Request-Id', 'req-l'),
    http.patch(`${peer}/data-cap`).send({ quotaBytes: 1000 }).set('X-Request-Id', 'req-c'),
    http.delete(`${peer}/speed-limit`).set('X-Request-Id', 'req-l-off'),
    http.delete(`${peer}/data-cap`).set('X-Request-Id', 'req-c-off'),
    http.delete(peer).set('X-Request-Id', 'req-delete'),
  ];
  for (const call of calls) expect((await call.set(auth)).status).to.equal(200);
}

// Issue 21: every change line carries the request id and the name of the token that made it;
// a token without a name is shown by a short fingerprint, never the token.
describe('change lines: request id and token name', () => {
  it('name each change with the request id and the name its token file gave the token', async () => {
    const tokens = { admin: parseTokenText(`ops-alice:${ADMIN}\n`, '/t'), read: [] };
    const { http, log } = setup({ tokens });
    await everyChange(http, ADMIN);
    const changes = log.lines().filter((l) => CHANGE_EVENTS.includes(String(l['event'])));
    expect(changes.map((l) => [l['event'], l['requestId'], l['tokenName']])).to.deep.equal([
      ['peer_created', 'req-create', 'ops-alice'],
      ['speed_limit_set', 'req-l', 'ops-alice'],
      ['data_cap_set', 'req-c', 'ops-alice'],
      ['speed_limit_removed', 'req-l-off', 'ops-alice'],
      ['data_cap_removed', 'req-c-off', 'ops-alice'],
      ['peer_deleted', 'req-delete', 'ops-alice'],
    ]);
    expect(log.text()).to.not.contain(ADMIN);
  });

  it('name an unnamed token by sha256: and the first 8 hex digits of its SHA-256', async () => {
    const { http, log } = setup({ tokens: { admin: [OTHER_ADMIN], read: [] } });
    await everyChange(http, OTHER_ADMIN);
    const changes = log.lines().filter((l) => CHANGE_EVENTS.includes(String(l['event'])));
    expect(changes).to.have.length(CHANGE_EVENTS.length);
    for (const line of changes) expect(line['tokenName']).to.equal(fingerprintOf(OTHER_ADMIN));
    expect(fingerprintOf(OTHER_ADMIN)).to.match(/^sha256:[0-9a-f]{8}$/);
    expect(log.text()).to.not.contain(OTHER_ADMIN);
  });

  it('tell two tokens of one file apart, and the request line names the token too', async () => {
    const text = `ops-alice:${ADMIN}\n${OTHER_ADMIN}\n`;
    const { http, log } = setup({ tokens: { admin: parseTokenText(text, '/t'), read: [] } });
    await http.post('/api/peer').set('Authorization', `Bearer ${ADMIN}`);
    await http.post('/api/peer').set('Authorization', `Bearer ${OTHER_ADMIN}`);
    const created = log.lines().filter((l) => l['event'] === 'peer_created');
    expect(created.map((l) => l['tokenName'])).to.deep.equal([
      'ops-alice',
      fingerprintOf(OTHER_ADMIN),
    ]);
    const requests = log.lines().filter((l) => l['msg'] === 'request');
    expect(requests.map((l) => l['tokenName'])).to.deep.equal([
      'ops-alice',
      fingerprintOf(OTHER_ADMIN),
    ]);
    // Each change line has the id of its own request, the one echoed to the client.
    expect(created.map((l) => l['requestId'])).to.deep.equal(requests.map((l) => l['requestId']));
  });

  it('name the read token a change was refused to on its request line', async () => {
    const tokens = { admin: [ADMIN], read: parseTokenText(`grafana:${READ}`, '/r') };
    const { http, log } = setup({ tokens });
    const res = await http.post('/api/peer').set('Authorization', `Bearer ${READ}`);
    expect(res.status).to.equal(403);
    const line = log.lines().find((l) => l['msg'] === 'request');
    expect(line).to.include({ status: 403, tokenName: 'grafana' });
  });

  it('give each of concurrent changes its own request id and token', async () => {
    const text = `alice:${ADMIN}\nbob:${OTHER_ADMIN}\n`;
    const { kernel, http, log } = setup({
      tokens: { admin: parseTokenText(text, '/t'), read: [] },
    });
    for (let n = 1; n <= 6; n += 1) kernel.putPeer(key(n), [`10.8.0.${n + 1}/32`]);
    // Sent together: they queue in the change queue and run one by one, interleaved with the
    // others' parsing and answering.
    await Promise.all(
      [1, 2, 3, 4, 5, 6].map((n) =>
        http
          .patch(`/api/peer/${encoded(key(n))}/speed-limit`)
          .set('Authorization', `Bearer ${n % 2 === 0 ? ADMIN : OTHER_ADMIN}`)
          .set('X-Request-Id', `req-${n}`)
          .send({ bytesPerSecond: 1000 * n }),
      ),
    );
    const set = log.lines().filter((l) => l['event'] === 'speed_limit_set');
    expect(set).to.have.length(6);
    for (const line of set) {
      const n = Number(line['bytesPerSecond']) / 1000;
      expect(line['publicKey']).to.equal(key(n));
      expect(line['requestId']).to.equal(`req-${n}`);
      expect(line['tokenName']).to.equal(n % 2 === 0 ? 'alice' : 'bob');
    }
  });

  it('carry the request id without a token name when no token is configured', async () => {
    const { http, log } = setup();
    const res = await http.post('/api/peer').set('X-Request-Id', 'req-open');
    expect(res.status).to.equal(201);
    const created = log.lines().find((l) => l['event'] === 'peer_created');
    expect(created).to.include({ requestId: 'req-open' });
    expect(created).to.not.have.property('tokenName');
  });

  it('leave lines logged after the change without its fields', async () => {
    const { http, log } = setup({ token: ADMIN });
    await http.post('/api/peer').set('Authorization', `Bearer ${ADMIN}`);
    log.logger.info({ event: 'later' }, 'a line of no request');
    const later = log.lines().find((l) => l['event'] === 'later');
    expect(later).to.not.have.property('requestId');
    expect(later).to.not.have.property('tokenName');
  });
});
