/**
 * GET /api/events (DESIGN §3 "Events"): the Server-Sent Events stream of src/events, read scope.
 * Its query check and the payload of every event type (for its entry in the route table, so the
 * OpenAPI document shows them, and the webhooks that carry the same payloads), and its handler,
 * which sends the headers and hands the response to the room's EventStreams.
 */
import type { ValidateFunction } from 'ajv';
import type { RequestHandler } from 'express';
import {
  EVENT_TYPES,
  EventStreamsFullError,
  RESET_EVENT,
  isEventType,
  type EventStreams,
  type EventType,
} from '../events';
import { ValidationError } from '../peers';
import { HttpError } from './errors';
import { ajv, check } from './schemas';

export interface EventsQuery {
  types?: string;
}

export const eventsQuery: ValidateFunction<EventsQuery> = ajv.compile<EventsQuery>({
  type: 'object',
  properties: {
    types: {
      type: 'string',
      maxLength: 1024,
      description: `Comma-separated event types to receive (default: all): ${EVENT_TYPES.join(', ')}`,
    },
  },
  additionalProperties: false,
});

/** The set `?types=` asks for, null for all; an unknown type is 400. */
export function parseTypes(query: EventsQuery): ReadonlySet<EventType> | null {
  if (query.types === undefined) return null;
  const types = new Set<EventType>();
  for (const name of query.types.split(',')) {
    const type = name.trim();
    if (!isEventType(type)) {
      throw new ValidationError(
        `Invalid query: types holds ${JSON.stringify(type)}, which is not an event type; the types are ${EVENT_TYPES.join(', ')}`,
        [{ field: '/types', message: `unknown event type ${JSON.stringify(type)}` }],
      );
    }
    types.add(type);
  }
  return types;
}

type JsonSchema = Readonly<Record<string, unknown>>;
const nullable = (schema: JsonSchema): JsonSchema => ({ anyOf: [schema, { type: 'null' }] });
const TIME: JsonSchema = { type: 'string', format: 'date-time' };
const ORIGIN: JsonSchema = {
  enum: ['api', 'kernel', 'period'],
  description:
    'api: made through wg-peerd; kernel: found in the kernel (made behind its back); period: a billing-period reset the daemon made on schedule',
};

function payload(type: string, peer: boolean, fields: Record<string, JsonSchema>): JsonSchema {
  const properties: Record<string, JsonSchema> = {
    type: { const: type },
    at: { ...TIME, description: 'When it happened (ISO 8601 UTC)' },
    interface: { type: 'string' },
    ...(peer
      ? { public_key: nullable({ type: 'string' }), ip_address: nullable({ type: 'string' }) }
      : {}),
    ...fields,
  };
  return {
    type: 'object',
    properties,
    required: Object.keys(properties),
  };
}

/** The payload with `fields` not required. */
function optional(schema: JsonSchema, fields: readonly string[]): JsonSchema {
  const required = schema.required as string[];
  return { ...schema, required: required.filter((field) => !fields.includes(field)) };
}

/** The `data:` of every event type (and the body of its webhook). */
export const eventPayload: JsonSchema = {
  oneOf: [
    payload('peer.created', true, { origin: ORIGIN }),
    payload('peer.deleted', true, { origin: ORIGIN }),
    payload('peer.connected', true, {
      last_handshake: { ...TIME, description: 'The handshake that made it ALIVE (also `at`)' },
      endpoint: nullable({ type: 'string' }),
    }),
    payload('peer.disconnected', true, {
      last_handshake: {
        ...nullable(TIME),
        description: '`at` is this plus 150 s: the moment the peer became DEAD',
      },
    }),
    payload('peer.limit_changed', true, {
      origin: ORIGIN,
      bytes_per_second: nullable({ type: 'integer', minimum: 0 }),
    }),
    payload('peer.cap_changed', true, {
      origin: ORIGIN,
      quota_bytes: nullable({ type: 'integer', minimum: 0 }),
    }),
    payload('peer.cap_exhausted', true, {
      quota_bytes: { type: 'integer', minimum: 0 },
      used_bytes: { type: 'integer', minimum: 0 },
    }),
    optional(
      payload('peer.cap_reset', true, {
        origin: ORIGIN,
        quota_bytes: { type: 'integer', minimum: 0 },
        used_bytes: { type: 'integer', minimum: 0, description: 'The closing usage' },
        period: { enum: ['day', 'week', 'month'], description: 'A billing-period reset only' },
        due: { ...TIME, description: 'A billing-period reset only: when it fell due' },
      }),
      ['period', 'due'],
    ),
    payload('peer.throttled', true, {}),
    ...['peer.suspended', 'peer.resumed'].map((type) => payload(type, true, { origin: ORIGIN })),
    payload('interface.lost', false, { reason: { type: 'string' } }),
    payload('interface.restored', false, {}),
    payload(RESET_EVENT, false, {
      reason: {
        type: 'string',
        description: 'Why the events missed cannot be replayed: list the peers again, then go on',
      },
    }),
  ],
};

/** Seconds a client refused for a full set of streams is asked to wait (Retry-After). */
export const STREAMS_FULL_RETRY_AFTER_S = 30;

/**
 * The handler createApp serves EVENTS_ROUTE with. With --max-event-streams open, one more is
 * 503 EVENT_STREAMS_FULL (JSON, with Retry-After) before any header of a stream is sent.
 */
export function eventStreamHandler(
  streams: Pick<EventStreams, 'open' | 'full' | 'maxStreams' | 'refused'>,
): RequestHandler {
  return (req, res, next) => {
    let types: ReadonlySet<EventType> | null;
    try {
      types = parseTypes(check(eventsQuery, req.query, 'query'));
    } catch (error) {
      next(error);
      return;
    }
    if (streams.full) {
      streams.refused();
      next(
        new HttpError(
          503,
          'EVENT_STREAMS_FULL',
          new EventStreamsFullError(streams.maxStreams).message,
          { 'Retry-After': String(STREAMS_FULL_RETRY_AFTER_S) },
        ),
      );
      return;
    }
    const header = req.headers['last-event-id'];
    res.writeHead(200, {
      'Content-Type': 'text/event-stream; charset=utf-8',
      'Cache-Control': 'no-store',
      Connection: 'keep-alive',
      // nginx buffers responses unless told not to.
      'X-Accel-Buffering': 'no',
    });
    res.flushHeaders();
    // A stream has no idle time: the keep-alive comments are its traffic.
    req.socket.setTimeout(0);
    streams.open(res, {
      types,
      lastEventId: typeof header === 'string' ? header.trim() : undefined,
      client: req.socket.remoteAddress ?? null,
    });
  };
}
