/**
 * GET /api/events (DESIGN §3 "Events"): the Server-Sent Events stream of src/events, read scope.
 * Its query check, the payload of every event type (the catalog's, for its entry in the route
 * table, so the OpenAPI document shows them, and the webhooks that carry the same payloads),
 * and its handler, which hands the request to the EventStreams' admission (`admit`): on a later
 * turn of the event loop, a few per turn, it is refused (503, the streams full) or gets the
 * headers and its stream. A burst of stream requests thus never holds the API's other requests
 * for more than a few answers at a time (issue 30). The common request is taken before Express
 * by its fast path (events-fast-path.ts), which answers through the same functions
 * (`answerStream`, `streamsFullError`).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { ValidateFunction } from 'ajv';
import type { RequestHandler } from 'express';
import {
  EVENT_PAYLOAD_SCHEMA,
  EVENT_TYPES,
  EventStreamsFullError,
  isEventType,
  type EventStreams,
  type EventType,
} from '../events';
import { ValidationError } from '../peers';
import { HttpError } from './errors';
import { REQUEST_ID_HEADER } from './request-log';
import { check, compiledOnUse } from './schemas';

export interface EventsQuery {
  types?: string;
}

export const eventsQuery: ValidateFunction<EventsQuery> = compiledOnUse<EventsQuery>({
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

/** The `data:` of every event type (and the body of its webhook): the catalog's (src/events). */
export const eventPayload = EVENT_PAYLOAD_SCHEMA;

/** Seconds a client refused for a full set of streams is asked to wait (Retry-After). */
export const STREAMS_FULL_RETRY_AFTER_S = 30;

/** What the HTTP side asks of the room's EventStreams. */
export type EventStreamsApi = Pick<
  EventStreams,
  'open' | 'full' | 'maxStreams' | 'refused' | 'admit' | 'apiRequest'
>;

/** The API requests in flight the streams yield to, by response, until it closes or streams. */
const apiHolds = new WeakMap<ServerResponse, () => void>();

/**
 * Counts `res`'s request as an API request in flight (EventStreams.apiRequest: the streams'
 * turns yield to it) until its response closes, or it turns out to be a stream request and is
 * answered (answerStream).
 */
export function holdForApiRequest(streams: EventStreamsApi, res: ServerResponse): void {
  const release = streams.apiRequest();
  apiHolds.set(res, release);
  res.once('close', release);
}

/** The 503 EVENT_STREAMS_FULL of a full set of streams, with Retry-After. */
export function streamsFullError(maxStreams: number): HttpError {
  return new HttpError(
    503,
    'EVENT_STREAMS_FULL',
    new EventStreamsFullError(maxStreams).message,
    { 'Retry-After': String(STREAMS_FULL_RETRY_AFTER_S) },
    // No error line with a stack per refusal: 136 of them held an admin's request 6.7 s
    // in issue 30's kernel test (200 raw sockets), and they are counted on /metrics.
    false,
  );
}

/**
 * A stream request's answer once admitted: nothing for a client that left while it waited (its
 * request line says aborted), `refuse` when the streams are full (counted), else the headers
 * (X-Request-Id first when `requestId` is given: the fast path's; Express's requestLog set it
 * already) and the stream.
 */
export function answerStream(
  streams: EventStreamsApi,
  req: IncomingMessage,
  res: ServerResponse,
  types: ReadonlySet<EventType> | null,
  requestId: string | null,
  refuse: () => void,
): void {
  apiHolds.get(res)?.();
  if (req.socket.destroyed) return;
  if (streams.full) {
    streams.refused();
    refuse();
    return;
  }
  const header = req.headers['last-event-id'];
  const headers: string[] = requestId === null ? [] : [REQUEST_ID_HEADER, requestId];
  headers.push(
    'Content-Type',
    'text/event-stream; charset=utf-8',
    'Cache-Control',
    'no-store',
    'Connection',
    'keep-alive',
    // nginx buffers responses unless told not to.
    'X-Accel-Buffering',
    'no',
  );
  res.writeHead(200, headers);
  res.flushHeaders();
  // A stream has no idle time: the keep-alive comments are its traffic.
  req.socket.setTimeout(0);
  streams.open(res, {
    types,
    lastEventId: typeof header === 'string' ? header.trim() : undefined,
    client: req.socket.remoteAddress ?? null,
  });
}

/**
 * The handler createApp serves EVENTS_ROUTE with (every request the fast path leaves to
 * Express). With --max-event-streams open, one more is 503 EVENT_STREAMS_FULL (JSON, with
 * Retry-After) before any header of a stream is sent.
 */
export function eventStreamHandler(streams: EventStreamsApi): RequestHandler {
  return (req, res, next) => {
    let types: ReadonlySet<EventType> | null;
    try {
      types = parseTypes(check(eventsQuery, req.query, 'query'));
    } catch (error) {
      next(error);
      return;
    }
    streams.admit(() =>
      answerStream(streams, req, res, types, null, () =>
        next(streamsFullError(streams.maxStreams)),
      ),
    );
  };
}
