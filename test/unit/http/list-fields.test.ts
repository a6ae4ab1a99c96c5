/**
 * Partial responses of GET /api/peers (issue 29, DESIGN §3 "List"): `?fields=` in Google APIs'
 * convention. Each body is held to the oracle's full body projected onto the fields
 * (test/support/peer-list.ts, referencePartialBody), on snapshots with peers with and without
 * a cap, plans, throttles, exhaustion and suspension; the 400s; one build per read and field
 * set, bounded; one compression per read, field set and encoding.
 */
import { expect } from 'chai';
import request from 'supertest';
import zlib from 'node:zlib';
import { createHttpServer, ListBodies } from '../../../src/http';
import { createApp } from '../../../src/http/app';
import {
  CAP_WRITERS,
  MAX_FIELD_SETS_PER_READ,
  PEER_WRITERS,
  Projection,
  buildListBody,
  type ListFilter,
} from '../../../src/http/list-body';
import { openApiDocument } from '../../../src/http/openapi';
import {
  CAP_FIELDS,
  FIELD_NAMES,
  PEER_FIELDS,
  checkListQuery,
  fieldSetOf,
  listQuery,
  type FieldSet,
} from '../../../src/http/schemas';
import type { KernelDataCap, LimitState, WireGuardPeer } from '../../../src/kernel/types';
import { ALIVE, DEAD, ValidationError, viewOf, type PeerSnapshot } from '../../../src/peers';
import { entriesOf, referenceBody, referencePartialBody } from '../../support/peer-list';
import { captureLog } from '../support/log-capture';

const TAKEN_AT = Date.parse('2026-03-01T12:00:00.000Z');
const FILTERS: ListFilter[] = [null, ALIVE, DEAD];
const POLL = ['public_key', 'status', 'data_cap.used_bytes'];

/**
 * `count` peers: never handshaked, fresh, at and past the 150 s threshold; with and without a
 * tunnel /32; with a limit, with a cap (some with a monthly plan, some throttling after it, some
 * used up with the time known, some no longer enforced), suspended or not.
 */
function snapshotOf(count: number, takenAt = TAKEN_AT): PeerSnapshot {
  const peers: WireGuardPeer[] = [];
  const limits = new Map<string, LimitState>();
  const caps = new Map<string, KernelDataCap>();
  const suspended = new Map<string, string>();
  const exhausted = new Map<string, number>();
  const ages = [null, 0, 150_000, 150_001, 3_600_000];
  for (let i = 0; i < count; i++) {
    const ip = `10.0.${(i >> 8) & 255}.${i & 255}`;
    const publicKey = Buffer.alloc(32, i % 251)
      .fill(i >> 8, 0, 1)
      .toString('base64');
    const age = ages[i % ages.length]!;
    peers.push({
      publicKey,
      endpoint: i % 2 === 0 ? null : `203.0.113.${i % 256}:51820`,
      lastHandshake: age === null ? null : new Date(takenAt - age),
      rxBytes: i * 1_001,
      txBytes: i * 7,
      persistentKeepalive: i % 3 === 0 ? 25 : 0,
      allowedIps:
        i % 13 === 7
          ? [{ family: 6, address: `fd00::${i.toString(16)}`, cidr: 128 }]
          : [{ family: 4, address: ip, cidr: 32 }],
    });
    if (i % 4 === 1) limits.set(ip, { download: 125_000, upload: 125_000 });
    if (i % 3 !== 0) {
      const cap: KernelDataCap = { quotaBytes: 1_000_000 + i, usedBytes: i * 10, enforced: true };
      if (i % 5 === 1) {
        cap.plan = {
          period: 'month',
          periodStart: { at: Date.parse('2026-01-31T08:00:00Z'), offsetMinutes: 120 },
          periodFrom: Date.parse('2026-02-28T08:00:00Z'),
          previousUsedBytes: i % 2 === 0 ? null : 9_000,
        };
      }
      if (i % 7 === 2) {
        cap.throttleBytesPerSecond = 100_000;
        cap.throttled = i % 14 === 2;
      }
      if (i % 11 === 4) {
        cap.usedBytes = cap.quotaBytes;
        exhausted.set(ip, takenAt - 60_000);
      }
      if (i % 17 === 5) cap.enforced = false;
      caps.set(ip, cap);
    }
    if (i % 19 === 3) suspended.set(ip, publicKey);
  }
  return {
    takenAt,
    readMs: 1,
    device: {
      name: 'wg0',
      ifindex: 7,
      publicKey: Buffer.alloc(32, 9).toString('base64'),
      listenPort: 51820,
      fwmark: 0,
      peers,
    },
    limits,
    caps,
    suspended,
    exhausted,
  };
}

/** The field set of names known to be valid (fieldSetOf), or null for the full body. */
function setOf(names: readonly string[]): FieldSet | null {
  return fieldSetOf(names);
}

describe('GET /api/peers?fields=: the partial body is the full body projected', () => {
  const sets: string[][] = [
    POLL,
    ['status'],
    ['data_cap'],
    ['public_key', 'data_cap.quota_bytes', 'data_cap.used_bytes', 'data_cap.enforced'],
    ['data_cap.period', 'data_cap.next_reset', 'data_cap.previous_period_used_bytes'],
    ['data_cap.after_cap', 'data_cap.throttle_bytes_per_second', 'data_cap.throttled'],
    ['data_cap.exhausted_at', 'suspended', 'ip_address', 'ipv6_address'],
    ['allowed_ips', 'endpoint', 'last_handshake', 'minutes_since_handshake'],
    ['rx_bytes', 'tx_bytes', 'persistent_keepalive_seconds'],
    ['speed_limit_bytes_per_second', 'speed_limit_holds', 'data_cap.period_start'],
    // Named out of order, twice, and `data_cap` beside a path into it (the whole object).
    ['status', 'public_key', 'status', 'data_cap.used_bytes', 'data_cap', 'public_key'],
  ];

  it('for every field set, filter and slice size, on peers with and without a cap', async () => {
    const snapshot = snapshotOf(400);
    for (const names of sets) {
      const fields = setOf(names);
      expect(fields, names.join(',')).to.not.equal(null);
      for (const filter of FILTERS) {
        const expected = referencePartialBody(entriesOf(snapshot, filter), filter, names);
        for (const slice of [1, 7, 1000]) {
          const body = await buildListBody(snapshot, filter, slice, null, new Projection(fields!));
          expect(body.toString('utf8'), `${names.join(',')} ${filter} ${slice}`).to.equal(
            expected.toString('utf8'),
          );
        }
      }
    }
    // The snapshot covers what the cases need: capped and cap-less peers, plans, throttles.
    const caps = entriesOf(snapshot, null).map((entry) => entry.dataCap);
    expect(caps.some((cap) => cap === null)).to.equal(true);
    expect(caps.some((cap) => cap?.plan !== undefined)).to.equal(true);
    expect(caps.some((cap) => cap?.throttled === true)).to.equal(true);
  });

  it('gives a peer without a cap "data_cap": null for a path into data_cap', async () => {
    const snapshot = snapshotOf(3); // peer 0 has no cap, peers 1 and 2 have one
    const body = JSON.parse(
      (await buildListBody(snapshot, null, 10, null, new Projection(setOf(POLL)!))).toString(),
    ) as { peers: unknown[] };
    expect(body.peers[0]).to.deep.equal({
      public_key: snapshot.device.peers[0]!.publicKey,
      status: 'No handshake yet',
      data_cap: null,
    });
    expect(body.peers[1]).to.deep.equal({
      public_key: snapshot.device.peers[1]!.publicKey,
      status: 'ALIVE',
      data_cap: { used_bytes: 10 },
    });
  });

  it('answers every field, or data_cap as all its fields, with the full body', async () => {
    expect(setOf(PEER_FIELDS)).to.equal(null);
    expect(setOf(FIELD_NAMES)).to.equal(null);
    const allOfCap = setOf(['status', ...CAP_FIELDS.map((name) => `data_cap.${name}`)]);
    expect(allOfCap).to.deep.equal(setOf(['data_cap', 'status']));
    expect(allOfCap?.capFields).to.equal(null);
  });

  it('writes each field of the schema as the full body does (no field without a writer)', () => {
    expect(Object.keys(PEER_WRITERS)).to.deep.equal([...PEER_FIELDS]);
    expect(Object.keys(CAP_WRITERS)).to.deep.equal([...CAP_FIELDS]);
    // Every field, data_cap field by field: the full fragment's bytes, peer by peer.
    const snapshot = snapshotOf(200);
    const every = new Projection({ key: 'every', fields: PEER_FIELDS, capFields: CAP_FIELDS });
    const full = JSON.parse(referenceBody(entriesOf(snapshot, null), null).toString()) as {
      peers: unknown[];
    };
    snapshot.device.peers.forEach((peer, i) => {
      expect(every.json(viewOf(peer, snapshot))).to.equal(JSON.stringify(full.peers[i]));
    });
  });

  it('normalizes a field set: one key for every spelling, in the body order', () => {
    const a = setOf(['data_cap.used_bytes', 'status', 'public_key']);
    const b = setOf(['public_key', 'public_key', 'status', 'data_cap.used_bytes']);
    expect(a).to.deep.equal(b);
    expect(a?.key).to.equal('public_key,status,data_cap.used_bytes');
    expect(a?.fields).to.deep.equal(['public_key', 'status', 'data_cap']);
    expect(setOf(['data_cap.used_bytes', 'data_cap'])?.key).to.equal('data_cap');
  });
});

// Not through the response recorder: the OpenAPI document's list schema is the full body's (its
// `fields` parameter says what a partial body holds), so openapi.test.ts checks full bodies only.
describe('GET /api/peers?fields=: through the API', () => {
  const snapshot = snapshotOf(120, Date.now() - 1000);
  function app(listBodies = new ListBodies()) {
    const service = { snapshot: async () => snapshot, freshSnapshot: () => snapshot };
    return createApp({
      service: service as never,
      logger: captureLog().logger,
      listBodies,
    });
  }

  it('answers the projection, with the envelope whole, with and without a status filter', async () => {
    const http = request(app());
    for (const filter of FILTERS) {
      const query = filter === null ? '' : `&status=${filter}`;
      const res = await http.get(`/api/peers?fields=${POLL.join(',')}${query}`);
      expect(res.status).to.equal(200);
      expect(res.text).to.equal(
        referencePartialBody(entriesOf(snapshot, filter), filter, POLL).toString(),
      );
      const body = res.body as { success: boolean; total_count: number; filter: string | null };
      expect(body.success).to.equal(true);
      expect(body.filter).to.equal(filter);
      expect(body.total_count).to.equal(entriesOf(snapshot, filter).length);
    }
    // Without fields: the full body, as before.
    const full = await http.get('/api/peers');
    expect(full.text).to.equal(referenceBody(entriesOf(snapshot, null), null).toString());
  });

  it('is not taken by the fast path (Express answers it, the same bytes)', async () => {
    const listBodies = new ListBodies();
    const service = { snapshot: async () => snapshot, freshSnapshot: () => snapshot };
    const server = createHttpServer({
      service: service as never,
      tokens: null,
      logger: captureLog().logger,
      version: 'test',
      listBodies,
    });
    const res = await request(server).get('/api/peers?fields=status,data_cap.used_bytes');
    expect(res.status).to.equal(200);
    expect(res.text).to.equal(
      referencePartialBody(entriesOf(snapshot, null), null, [
        'status',
        'data_cap.used_bytes',
      ]).toString(),
    );
  });

  const refused: Array<[string, string, string]> = [
    ['fields=public_key,nickname', '/fields', 'unknown field "nickname"'],
    ['fields=status,data_cap.nope', '/fields', 'unknown field "data_cap.nope"'],
    ['fields=data_cap(used_bytes)', '/fields', 'unknown field "data_cap(used_bytes)"'],
    ['fields=public_key,%20status', '/fields', 'unknown field " status"'],
    ['fields=Status', '/fields', 'unknown field "Status"'],
    ['fields=', '/fields', 'empty field name'],
    ['fields=status,,public_key', '/fields', 'empty field name'],
    ['fields=status,', '/fields', 'empty field name'],
    ['fields=status&fields=public_key', '/fields', 'must be string'],
    ['fields=status&status=alive', '/status', 'must be one of ALIVE, DEAD'],
  ];
  for (const [query, field, message] of refused) {
    it(`answers 400 VALIDATION_FAILED to ?${query}, naming the field`, async () => {
      const res = await request(app()).get(`/api/peers?${query}`);
      expect(res.status).to.equal(400);
      const body = res.body as {
        success: boolean;
        code: string;
        error: string;
        details: Array<{ field: string; message: string }>;
      };
      expect(body.success).to.equal(false);
      expect(body.code).to.equal('VALIDATION_FAILED');
      expect(body.details).to.deep.include({ field, message });
    });
  }

  it('refuses a value longer than every name twice over', () => {
    const long = Array.from({ length: 200 }, () => 'status').join(',');
    expect(() => checkListQuery({ fields: long })).to.throw(ValidationError);
    expect(checkListQuery({ fields: 'status,status' }).fields?.key).to.equal('status');
  });
});

describe('GET /api/peers?fields=: built once per read and field set, bounded', () => {
  it('builds once per read and normalized field set, and compresses once per encoding', async () => {
    const snapshot = snapshotOf(300);
    const bodies = new ListBodies(16);
    const one = setOf(POLL)!;
    const same = setOf(['data_cap.used_bytes', 'status', 'public_key', 'status'])!;
    const identity = await bodies.body(snapshot, null, 'identity', one);
    expect(await bodies.body(snapshot, null, 'identity', same)).to.equal(identity);
    const [gz, gzAgain] = await Promise.all([
      bodies.body(snapshot, null, 'gzip', one),
      bodies.body(snapshot, null, 'gzip', same),
    ]);
    expect(gzAgain).to.equal(gz);
    expect(bodies.builds).to.equal(1);
    expect(bodies.compressions).to.equal(1);
    expect(zlib.gunzipSync(gz).equals(identity)).to.equal(true);
    expect(bodies.ready(snapshot, null, 'gzip', same)).to.equal(gz);
    // Another filter is another body; the full body is apart from both.
    await bodies.body(snapshot, ALIVE, 'identity', one);
    const full = await bodies.body(snapshot, null, 'identity');
    expect(full.toString()).to.equal(referenceBody(entriesOf(snapshot, null), null).toString());
    expect(bodies.builds).to.equal(3);
    // The next read of an idle device: the same partial bytes again, not compressed again.
    const again = snapshotOf(0);
    const next: PeerSnapshot = {
      ...snapshot,
      device: { ...again.device, peers: snapshot.device.peers },
    };
    expect(await bodies.body(next, null, 'gzip', one)).to.equal(gz);
    expect(bodies.compressions).to.equal(1);
  });

  it(`keeps the bodies of at most ${MAX_FIELD_SETS_PER_READ} field sets per read; a further set is built for its request alone`, async () => {
    const snapshot = snapshotOf(60);
    const bodies = new ListBodies();
    const kept = PEER_FIELDS.slice(0, MAX_FIELD_SETS_PER_READ).map((name) => setOf([name])!);
    for (const fields of kept) await bodies.body(snapshot, null, 'identity', fields);
    expect(bodies.builds).to.equal(MAX_FIELD_SETS_PER_READ);
    const extra = setOf([PEER_FIELDS[MAX_FIELD_SETS_PER_READ]!])!;
    const first = await bodies.body(snapshot, null, 'identity', extra);
    const second = await bodies.body(snapshot, null, 'gzip', extra);
    expect(first.toString()).to.equal(
      referencePartialBody(entriesOf(snapshot, null), null, [extra.key]).toString(),
    );
    expect(zlib.gunzipSync(second).equals(first)).to.equal(true);
    expect(bodies.unkept).to.equal(2);
    expect(bodies.builds).to.equal(MAX_FIELD_SETS_PER_READ + 2);
    expect(bodies.ready(snapshot, null, 'identity', extra)).to.equal(null);
    // The kept sets are still answered from the memo, and the full body is not bounded by them.
    for (const fields of kept) {
      expect(bodies.ready(snapshot, null, 'identity', fields)).to.not.equal(null);
      await bodies.body(snapshot, null, 'identity', fields);
    }
    await bodies.body(snapshot, null, 'identity');
    expect(bodies.builds).to.equal(MAX_FIELD_SETS_PER_READ + 3);
    expect(bodies.unkept).to.equal(2);
    // A new read starts a new count.
    await bodies.body({ ...snapshot }, null, 'identity', extra);
    expect(bodies.unkept).to.equal(2);
  });
});

describe('GET /api/peers?fields=: the OpenAPI document', () => {
  it('documents the parameter with the schema that validates it', () => {
    const document = openApiDocument({ version: 'test' }) as {
      paths: Record<string, { get: { parameters: Array<{ name: string; schema: unknown }> } }>;
    };
    const parameter = document.paths['/api/peers']!.get.parameters.find((p) => p.name === 'fields');
    const schema = listQuery.schema as { properties: Record<string, unknown> };
    expect(parameter?.schema).to.equal(schema.properties['fields']);
    const pattern = new RegExp((parameter?.schema as { pattern: string }).pattern);
    expect(pattern.test(POLL.join(','))).to.equal(true);
    expect(pattern.test('public_key,nickname')).to.equal(false);
  });
});
