/**
 * The event types of DESIGN §3, each defined once, here: its name, whether it is about a peer
 * (then `public_key` and `ip_address` come with it), and its details as fields named in the
 * domain's camelCase, each with its JSON Schema. Everything else is derived from this table and
 * written nowhere else: EVENT_TYPES (what `?types=` and the webhooks file accept, and the
 * metric's labels), the TypeScript type of each event's details (DetailsOf, so a source that
 * publishes a type with other fields does not compile), the wire's snake_case names
 * (wireName), and the JSON Schema of every payload (EVENT_PAYLOAD_SCHEMA: the OpenAPI
 * document's Event, and the body of each webhook). The control event `reset` is defined here
 * too, but is no type a client subscribes to.
 */

export type JsonSchema = Readonly<Record<string, unknown>>;

/**
 * One field of an event's details: its JSON Schema and whether it may be left out; `T` is the
 * field's TypeScript type (carried by the `example` phantom, which is never set).
 */
export interface Field<T, Optional extends boolean = boolean> {
  readonly schema: JsonSchema;
  readonly optional: Optional;
  readonly example?: () => T;
}

function field<T>(schema: JsonSchema, description?: string): Field<T, false> {
  return {
    schema: description === undefined ? schema : { ...schema, description },
    optional: false,
  };
}

const count = (description?: string): Field<number, false> =>
  field({ type: 'integer', minimum: 0 }, description);
const text = (description?: string): Field<string, false> => field({ type: 'string' }, description);
/** An instant as ISO 8601 text in UTC. */
const time = (description?: string): Field<string, false> =>
  field({ type: 'string', format: 'date-time' }, description);

function nullable<T>(inner: Field<T, false>, description?: string): Field<T | null, false> {
  return field({ anyOf: [inner.schema, { type: 'null' }] }, description);
}

function optional<T>(inner: Field<T, false>): Field<T, true> {
  return { schema: inner.schema, optional: true };
}

function oneOf<const V extends string>(values: readonly V[], description: string): Field<V, false> {
  return field({ enum: values }, description);
}

type Fields = Readonly<Record<string, Field<unknown>>>;

export interface EventDefinition<F extends Fields = Fields> {
  /** A peer event: `public_key` and `ip_address` (either may be null) come with it. */
  readonly peer: boolean;
  readonly fields: F;
}

const peerEvent = <F extends Fields>(fields: F): EventDefinition<F> => ({ peer: true, fields });
const interfaceEvent = <F extends Fields>(fields: F): EventDefinition<F> => ({
  peer: false,
  fields,
});

const ORIGIN = oneOf(
  ['api', 'kernel', 'period'],
  'api: made through wg-peerd; kernel: found in the kernel (made behind its back); period: a billing-period reset the daemon made on schedule',
);

/** Every type a stream or a webhook target may ask for, in the order DESIGN §3 names them. */
export const EVENT_CATALOG = {
  'peer.created': peerEvent({ origin: ORIGIN }),
  'peer.deleted': peerEvent({ origin: ORIGIN }),
  'peer.connected': peerEvent({
    lastHandshake: time('The handshake that made it ALIVE (also `at`)'),
    endpoint: nullable(text()),
  }),
  'peer.disconnected': peerEvent({
    lastHandshake: nullable(time(), '`at` is this plus 150 s: the moment the peer became DEAD'),
  }),
  'peer.limit_changed': peerEvent({ origin: ORIGIN, bytesPerSecond: nullable(count()) }),
  'peer.cap_changed': peerEvent({
    origin: ORIGIN,
    quotaBytes: nullable(count()),
    throttleBytesPerSecond: optional(
      nullable(count(), 'A cap set with afterCap throttle: the rate once it is used up'),
    ),
  }),
  'peer.cap_exhausted': peerEvent({ quotaBytes: count(), usedBytes: count() }),
  'peer.cap_reset': peerEvent({
    origin: ORIGIN,
    quotaBytes: count(),
    usedBytes: count('The closing usage'),
    period: optional(oneOf(['day', 'week', 'month'], 'A billing-period reset only')),
    due: optional(time('A billing-period reset only: when it fell due')),
  }),
  'peer.throttled': peerEvent({
    quotaBytes: count(),
    usedBytes: count(),
    throttleBytesPerSecond: count('The rate the peer is slowed to until the next reset or a raise'),
  }),
  'peer.suspended': peerEvent({ origin: ORIGIN }),
  'peer.resumed': peerEvent({ origin: ORIGIN }),
  'peer.expired': peerEvent({
    origin: ORIGIN,
    expiresAt: time('The expiry that passed: the kernel stopped letting the peer pass then'),
  }),
  'peer.renewed': peerEvent({
    origin: ORIGIN,
    expiresAt: nullable(time(), 'The new expiry; null: none. The peer passes again from now'),
  }),
  'interface.lost': interfaceEvent({ reason: text() }),
  'interface.restored': interfaceEvent({}),
};

export type EventType = keyof typeof EVENT_CATALOG;

export const EVENT_TYPES = Object.keys(EVENT_CATALOG) as readonly EventType[];

export function isEventType(value: string): value is EventType {
  return Object.prototype.hasOwnProperty.call(EVENT_CATALOG, value);
}

/** The control event a resumption that cannot be served gets (re-list, then go on). */
export const RESET_EVENT = 'reset';
const RESET_DEFINITION = interfaceEvent({
  reason: text('Why the events missed cannot be replayed: list the peers again, then go on'),
});

type FieldsOf<T extends EventType> = (typeof EVENT_CATALOG)[T]['fields'];
type TypeOf<F> = F extends Field<infer V> ? V : never;
type RequiredKeys<F> = { [K in keyof F]: F[K] extends Field<unknown, true> ? never : K }[keyof F];

/** The details of an event of type `T`, in the domain's camelCase. */
export type DetailsOf<T extends EventType> = {
  [K in RequiredKeys<FieldsOf<T>>]: TypeOf<FieldsOf<T>[K]>;
} & { [K in Exclude<keyof FieldsOf<T>, RequiredKeys<FieldsOf<T>>>]?: TypeOf<FieldsOf<T>[K]> };

/** A domain name as the wire writes it: `bytesPerSecond` → `bytes_per_second` (snake stays). */
export function wireName(name: string): string {
  return name.replace(/[A-Z]/g, (letter) => `_${letter.toLowerCase()}`);
}

/** A wire name in the domain's camelCase: `bytes_per_second` → `bytesPerSecond`. */
export function domainName(name: string): string {
  return name.replace(/_([a-z0-9])/g, (_match, letter: string) => letter.toUpperCase());
}

/** The `data:` of one type (and the body of its webhook). */
function payloadSchema(type: string, definition: EventDefinition): JsonSchema {
  const nullableText = { anyOf: [{ type: 'string' }, { type: 'null' }] };
  const properties: Record<string, JsonSchema> = {
    type: { const: type },
    at: { type: 'string', format: 'date-time', description: 'When it happened (ISO 8601 UTC)' },
    interface: { type: 'string' },
    ...(definition.peer
      ? {
          public_key: nullableText,
          ip_address: nullableText,
          name: { ...nullableText, description: "The peer's name (issue 31); null: none" },
        }
      : {}),
  };
  const required = Object.keys(properties);
  for (const [name, { schema, optional: mayLack }] of Object.entries(definition.fields)) {
    properties[wireName(name)] = schema;
    if (!mayLack) required.push(wireName(name));
  }
  return { type: 'object', properties, required };
}

/** The payload of every event type and of `reset`: one of them, told apart by `type`. */
export const EVENT_PAYLOAD_SCHEMA: JsonSchema = {
  oneOf: [
    ...EVENT_TYPES.map((type) => payloadSchema(type, EVENT_CATALOG[type])),
    payloadSchema(RESET_EVENT, RESET_DEFINITION),
  ],
};
