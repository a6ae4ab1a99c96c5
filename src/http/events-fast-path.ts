/**
 * The fast path of GET /api/events (issue 30): a stream request taken before Express, as the
 * list's poll is (list.ts). What a burst of stream requests costs is the HTTP stack around
 * them, and it is paid for every one before any other request is read: 200 raw sockets asking
 * at once went through Express's router and layers, expressInit, the query parser, the JSON
 * body parser of a bodiless GET, a labels object for the histogram and, for the 136 refused, the
 * error handler, and an admin's POST /api/peer sent behind them waited 3 s in the VM. Here a
 * request costs a look at its method, URL and headers and a place in the streams' admission:
 * on a later turn, a few per turn (src/events/streams.ts), its token is checked and it is
 * answered (events.ts `answerStream`).
 *
 * It is a twin of the Express route, not a second implementation: the same admission and
 * answer (answerStream), refusal (streamsFullError, written as app.ts onError writes it:
 * list.ts writeError), request id and log line (list.ts traceFastRequest), token check
 * (list.ts readerOf: bearerToken, covers) and duration series (the metrics' requestTimer).
 * test/unit/http/events-fast-path.test.ts holds its answers equal to the Express app's.
 *
 * What it takes is chosen so that Express would do nothing else for it: GET only, the path
 * exactly `/api/events` and the query absent or exactly `types=` with known event types
 * (letters, dots, underscores and commas only, within the schema's 1,024 characters: anything
 * else, the 400s among it, is Express's); no body announced. A request whose token does not let
 * it read (none, a wrong one) is handed to Express in its turn, so 401 and 403 are answered in
 * one place.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Logger } from '../log';
import type { EventType } from '../events';
import { toErrorResponse } from './errors';
import {
  answerStream,
  eventsQuery,
  parseTypes,
  streamsFullError,
  type EventStreamsApi,
} from './events';
import { bodiless, readerOf, traceFastRequest, writeError, type FastPath } from './list';
import type { TokenStore } from './auth';
import type { Metrics, RequestTimer } from './metrics';

import { routeById } from './routes';

export interface EventsFastPathOptions {
  streams: EventStreamsApi;
  /** The Express app, which answers a request whose token does not let it read (401, 403). */
  express: (req: IncomingMessage, res: ServerResponse) => void;
  tokens?: TokenStore | null;
  logger: Logger;
  /** The metrics the app was given; absent: no duration is recorded. */
  metrics?: Pick<Metrics, 'requestTimer'> | undefined;
}

const EVENTS_ROUTE = routeById('events');
/** The route's path, which is also its log path. */
const EVENTS_PATH = EVENTS_ROUTE.openapiPath;
const TYPES_QUERY = `${EVENTS_PATH}?types=`;
/** What a `types` value the fast path takes is made of: no escapes, no other parameter. */
const PLAIN_TYPES = /^[a-z_.,]+$/;

/** The types a URL the fast path takes asks for (null: all); undefined for every other URL. */
function typesOf(url: string | undefined): ReadonlySet<EventType> | null | undefined {
  if (url === EVENTS_PATH) return null;
  if (url === undefined || !url.startsWith(TYPES_QUERY)) return undefined;
  const value = url.slice(TYPES_QUERY.length);
  if (!PLAIN_TYPES.test(value) || !eventsQuery({ types: value })) return undefined;
  try {
    return parseTypes({ types: value });
  } catch {
    return undefined; // an unknown type: Express's 400
  }
}

export function eventsFastPath(options: EventsFastPathOptions): FastPath {
  const { streams, logger, express } = options;
  const tokens = options.tokens ?? null;
  const timer: RequestTimer | null =
    options.metrics?.requestTimer('GET', EVENTS_ROUTE.label) ?? null;
  const refusal = toErrorResponse(streamsFullError(streams.maxStreams));
  const trace = { logger, timer, path: EVENTS_PATH, polled: EVENTS_ROUTE.polled };

  /** The request in its turn: the token checked, then answered (or handed to Express). */
  const answer = (
    req: IncomingMessage,
    res: ServerResponse,
    types: ReadonlySet<EventType> | null,
    started: bigint,
  ): void => {
    const headers = req.headers;
    const reader = tokens === null ? null : readerOf(tokens, headers.authorization);
    if (tokens !== null && reader === null) {
      // A missing or wrong token: refused by Express, in one place.
      express(req, res);
      return;
    }
    const requestId = traceFastRequest(trace, req, res, reader, started);
    answerStream(streams, req, res, types, requestId, () => writeError(res, refusal, requestId));
  };

  return (req, res) => {
    if (req.method !== 'GET') return false;
    const types = typesOf(req.url);
    if (types === undefined) return false;
    if (!bodiless(req.headers)) return false;
    const started = process.hrtime.bigint();
    // Everything else on a later turn, a few per turn, the token check too (a hash each).
    streams.admit(() => answer(req, res, types, started));
    return true;
  };
}
