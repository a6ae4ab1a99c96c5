import { expect } from 'chai';
import Ajv2020 from 'ajv/dist/2020';
import {
  EVENT_CATALOG,
  EVENT_PAYLOAD_SCHEMA,
  EVENT_TYPES,
  EventHub,
  domainName,
  fromPeerChange,
  isEventType,
  wireName,
  type DetailsOf,
  type EventType,
} from '../../../src/events';
import { routeById } from '../../../src/http/routes';
import { parseTypes } from '../../../src/http/events';

const KEY = Buffer.alloc(32, 3).toString('base64');
const AT = '2026-03-01T12:00:00.000Z';

/** One event of each type with every field it may carry, written in the domain's camelCase. */
const SAMPLES: { [T in EventType]: DetailsOf<T> } = {
  'peer.created': { origin: 'api' },
  'peer.deleted': { origin: 'kernel' },
  'peer.connected': { lastHandshake: AT, endpoint: '198.51.100.2:51820' },
  'peer.disconnected': { lastHandshake: null },
  'peer.limit_changed': { origin: 'api', bytesPerSecond: 125_000 },
  'peer.cap_changed': { origin: 'api', quotaBytes: 5_000, throttleBytesPerSecond: 1_000 },
  'peer.cap_exhausted': { quotaBytes: 5_000, usedBytes: 5_001 },
  'peer.cap_reset': {
    origin: 'period',
    quotaBytes: 5_000,
    usedBytes: 4_000,
    period: 'month',
    due: AT,
  },
  'peer.throttled': { quotaBytes: 5_000, usedBytes: 5_001, throttleBytesPerSecond: 1_000 },
  'peer.suspended': { origin: 'api' },
  'peer.resumed': { origin: 'api' },
  'peer.expired': { origin: 'kernel', expiresAt: AT },
  'peer.renewed': { origin: 'api', expiresAt: null },
  'interface.lost': { reason: 'wg0 is gone' },
  'interface.restored': {},
};

// Issue 30: each event type is defined once; the list, the schema, ?types= and the wire's
// snake_case all come from that one definition.
describe('events: the catalog, where each event type is defined once', () => {
  it('holds the 15 types of DESIGN §3 (issue 31 added peer.expired and peer.renewed), in its order', () => {
    expect(EVENT_TYPES).to.deep.equal([
      'peer.created',
      'peer.deleted',
      'peer.connected',
      'peer.disconnected',
      'peer.limit_changed',
      'peer.cap_changed',
      'peer.cap_exhausted',
      'peer.cap_reset',
      'peer.throttled',
      'peer.suspended',
      'peer.resumed',
      'peer.expired',
      'peer.renewed',
      'interface.lost',
      'interface.restored',
    ]);
    expect(isEventType('reset')).to.equal(false);
    expect(isEventType('toString')).to.equal(false);
  });

  it('names a field in camelCase in the domain and in snake_case on the wire, both ways', () => {
    expect(wireName('throttleBytesPerSecond')).to.equal('throttle_bytes_per_second');
    expect(wireName('origin')).to.equal('origin');
    expect(wireName('bytes_per_second')).to.equal('bytes_per_second');
    expect(domainName('last_handshake')).to.equal('lastHandshake');
    for (const type of EVENT_TYPES) {
      for (const name of Object.keys(EVENT_CATALOG[type].fields)) {
        expect(domainName(wireName(name)), name).to.equal(name);
      }
    }
  });

  it("writes every type's details as the wire's snake_case, and each payload is valid against its own schema and no other", () => {
    const hub = new EventHub({ interfaceName: 'wg0', historySize: 100, run: 'r' });
    const ajv = new Ajv2020({ strict: true, validateFormats: false });
    const oneOf = EVENT_PAYLOAD_SCHEMA.oneOf as Array<Record<string, unknown>>;
    const validators = oneOf.map((schema) => ajv.compile(schema));
    const whole = ajv.compile(EVENT_PAYLOAD_SCHEMA);
    for (const type of EVENT_TYPES) {
      const peer = EVENT_CATALOG[type].peer ? { publicKey: KEY, ipAddress: '10.8.0.2' } : {};
      const input = { type, ...peer, details: SAMPLES[type] } as Parameters<EventHub['publish']>[0];
      const data = JSON.parse(hub.publish(input).json) as Record<string, unknown>;
      const names = Object.keys(SAMPLES[type]).map(wireName);
      expect(Object.keys(data), type).to.include.members(names);
      expect(
        Object.keys(data).some((name) => /[A-Z]/.test(name)),
        type,
      ).to.equal(false);
      expect(whole(data), `${type} ${JSON.stringify(whole.errors)}`).to.equal(true);
      expect(
        validators.filter((validate) => validate(data)),
        type,
      ).to.have.length(1);
    }
  });

  it('requires every field but those marked optional, in the schema and in DetailsOf', () => {
    const oneOf = EVENT_PAYLOAD_SCHEMA.oneOf as Array<{
      properties: Record<string, { const?: string }>;
      required: string[];
    }>;
    const reset = oneOf.find((s) => s.properties.type!.const === 'peer.cap_reset');
    expect(reset!.required).to.include.members(['origin', 'quota_bytes', 'used_bytes']);
    expect(reset!.required).to.not.include('period').and.not.include('due');
    // A reset made through the API carries no period: still a valid DetailsOf.
    const api: DetailsOf<'peer.cap_reset'> = { origin: 'api', quotaBytes: 1, usedBytes: 1 };
    expect(api.period).to.equal(undefined);
    expect(oneOf.map((s) => s.properties.type!.const)).to.deep.equal([...EVENT_TYPES, 'reset']);
  });

  it('is what ?types= accepts and what the events route names in the OpenAPI document', () => {
    expect([...parseTypes({ types: EVENT_TYPES.join(',') })!]).to.deep.equal(EVENT_TYPES);
    expect(() => parseTypes({ types: 'reset' })).to.throw(/not an event type/);
    const summary = routeById('events').summary;
    for (const type of EVENT_TYPES) expect(summary).to.include(type);
  });

  it("takes PeerService's changes (snake_case, loosely typed) into the catalog's camelCase, origin api unless said", () => {
    expect(
      fromPeerChange({
        type: 'peer.limit_changed',
        publicKey: KEY,
        ipAddress: '10.8.0.2',
        details: { bytes_per_second: null },
      }),
    ).to.deep.equal({
      type: 'peer.limit_changed',
      publicKey: KEY,
      ipAddress: '10.8.0.2',
      details: { origin: 'api', bytesPerSecond: null },
    });
    const period = fromPeerChange({
      type: 'peer.cap_reset',
      publicKey: KEY,
      ipAddress: null,
      details: { origin: 'period', quota_bytes: 1, used_bytes: 2, period: 'day', due: AT },
    });
    expect(period.details).to.deep.equal({
      origin: 'period',
      quotaBytes: 1,
      usedBytes: 2,
      period: 'day',
      due: AT,
    });
  });
});
