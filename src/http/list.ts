/**
 * The answer of GET /api/peers (issue 17: the list module owns it): the Express route's handler
 * (`listRoute`), the fast path of the common poll (`listFastPath`) and the one 200 writer both
 * use (`writeListResponse`). The body itself is list-body.ts's; the route's facts (path, label,
 * polled) are the route table's.
 *
 * The fast path of the common poll: `GET /api/peers` (optionally `?status=ALIVE` or
 * `?status=DEAD`), without a body, with a token that may read. Monitoring asks this many times
 * a second and its body is memoized per kernel read (list-body.ts), so what a poll costs is the
 * HTTP stack around those bytes: Express's router and layers, expressInit, the query parser,
 * the JSON body parser of a bodiless GET, a labels object for the histogram. createServer
 * (server.ts) tries this before the Express app; it answers what it takes, and everything else
 * goes to Express untouched.
 *
 * It is a twin of the Express route (`listRoute` below), not a second implementation: the
 * same ListBodies and service.snapshot(), the same 200 writer (writeListResponse), the same
 * request id (requestIdFrom), log line (logClosedResponse), server-fault line (logServerFault), error
 * envelope (toErrorResponse), token check (bearerToken, covers) and duration series (the
 * metrics' requestTimer). test/unit/http/list-fast-path.test.ts holds its answers equal to the
 * Express app's, header by header and byte by byte.
 *
 * What it takes is chosen so that Express would do nothing else for it:
 * - the path exactly `/api/peers` and the query exactly absent, `status=ALIVE`, `status=DEAD`,
 *   or `fields=` alone with a field list of known names in plain characters (issue 29: the
 *   partial poll, `[a-z0-9_.,]` only, so Express's query parser would read it as it stands;
 *   a trailing slash, other case, percent-encoding, another parameter, an unknown name: Express,
 *   which also answers the 400s);
 * - GET only (HEAD stays with Express, which strips the body);
 * - no body announced: no Transfer-Encoding, and no Content-Length unless it is "0" without a
 *   Content-Type (with one, express.json looks at a zero-length body and may refuse its charset);
 * - no tokens configured, or a bearer token of the read or admin scope: a missing or wrong one
 *   goes to Express, so 401 and 403 are answered in one place.
 */
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from 'node:http';
import type { RequestHandler } from 'express';
import type { Logger } from '../log';
import { ALIVE, DEAD, type PeerServiceApi } from '../peers';
import { bearerToken, covers, type TokenIdentity, type TokenStore } from './auth';
import { toErrorResponse, type ErrorResponse } from './errors';
import {
  Projection,
  buildListBody,
  negotiateEncoding,
  type BodyEncoding,
  type ListBodies,
  type ListFilter,
} from './list-body';
import type { Metrics, RequestTimer } from './metrics';
import {
  REQUEST_ID_HEADER,
  logClosedResponse,
  logServerFault,
  requestIdFrom,
  type RequestContext,
} from './request-log';
import { routeById, type RouteContext } from './routes';
import { checkListQuery, type FieldSet } from './schemas';

/** Answers the request and returns true, or returns false having touched nothing. */
export type FastPath = (req: IncomingMessage, res: ServerResponse) => boolean;

export interface ListFastPathOptions {
  service: Pick<PeerServiceApi, 'snapshot' | 'freshSnapshot'>;
  /** The Express app's own instance (AppOptions.listBodies), so both share every body. */
  listBodies: ListBodies;
  tokens?: TokenStore | null;
  logger: Logger;
  /** The metrics the app was given (AppOptions.metrics); absent: no duration is recorded. */
  metrics?: Pick<Metrics, 'requestTimer'> | undefined;
}

const LIST_ROUTE = routeById('listPeers');
/** The route's path, which is also its log path; the fast path takes only this exact path. */
const LIST_PATH = LIST_ROUTE.openapiPath;

/**
 * The 200 answer of GET /api/peers, written by the route and by the fast path, so the two send
 * the same headers in the same order. `requestId` is for the fast path, which sets no header
 * before this one call (the route's requestLog set it already: null). A flat array, not an
 * object: no object per request is built and spread.
 */
export function writeListResponse(
  res: ServerResponse,
  requestId: string | null,
  body: Buffer,
  encoding: BodyEncoding,
  takenAt: number,
): void {
  // Age (RFC 9111 §5.1) in whole seconds for caches; X-Data-Age-Ms in milliseconds for
  // pollers that want to know precisely how old the data is (the freshness window).
  const ageMs = Math.max(0, Date.now() - takenAt);
  const headers: Array<string | number> = requestId === null ? [] : [REQUEST_ID_HEADER, requestId];
  headers.push(
    'Content-Type',
    'application/json; charset=utf-8',
    'Content-Length',
    body.length,
    'Vary',
    'Accept-Encoding',
  );
  if (encoding !== 'identity') headers.push('Content-Encoding', encoding);
  headers.push('Age', Math.floor(ageMs / 1000), 'X-Data-Age-Ms', Math.round(ageMs));
  res.writeHead(200, headers);
  res.end(body);
}

/**
 * The Express route of GET /api/peers (every request the fast path leaves to Express), among
 * them every partial response (`?fields=`, issue 29): its body is built once per read, filter
 * and field set like the full one (ListBodies).
 */
export function listRoute({
  service,
  listBodies,
}: RouteContext & { listBodies: ListBodies }): RequestHandler {
  return (req, res, next) => {
    const answer = async (): Promise<void> => {
      const { filter, fields, name } = checkListQuery(req.query);
      const snapshot = await service.snapshot();
      if (name !== null) {
        // A name picks a few peers (issue 31): their body is built for this request alone,
        // from the same read, and not kept.
        const named = snapshot.device.peers.filter(
          (p) => snapshot.names?.get(p.publicKey) === name,
        );
        const narrowed = { ...snapshot, device: { ...snapshot.device, peers: named } };
        const projection = fields === null ? null : new Projection(fields);
        const body = await buildListBody(narrowed, filter, undefined, null, projection);
        writeListResponse(res, null, body, 'identity', snapshot.takenAt);
        return;
      }
      const encoding = negotiateEncoding(req.headers['accept-encoding']);
      const body = await listBodies.body(snapshot, filter, encoding, fields);
      // requestLog set X-Request-Id already.
      writeListResponse(res, null, body, encoding, snapshot.takenAt);
    };
    answer().catch(next);
  };
}

/** What a URL the fast path takes asks for: a filter, or a field set (null: the full body). */
interface FastList {
  filter: ListFilter;
  fields: FieldSet | null;
}

const ALL: FastList = { filter: null, fields: null };
const ALIVE_ONLY: FastList = { filter: ALIVE, fields: null };
const DEAD_ONLY: FastList = { filter: DEAD, fields: null };
const FIELDS_QUERY = `${LIST_PATH}?fields=`;
/** A field list Express's query parser reads as it stands: no escapes, no '+', no '&'. */
const PLAIN_FIELDS = /^[a-z0-9_.,]+$/;
/** Field lists already checked (checkListQuery's answer), bounded: emptied when full. */
const MAX_KNOWN_FIELD_LISTS = 64;

/** What each URL the fast path takes asks for; undefined for every other URL. */
function listOf(url: string | undefined, known: Map<string, FastList>): FastList | undefined {
  switch (url) {
    case LIST_PATH:
      return ALL;
    case `${LIST_PATH}?status=${ALIVE}`:
      return ALIVE_ONLY;
    case `${LIST_PATH}?status=${DEAD}`:
      return DEAD_ONLY;
    default:
      return url === undefined || !url.startsWith(FIELDS_QUERY) ? undefined : fieldsOf(url, known);
  }
}

/** `/api/peers?fields=<list>` of known names in plain characters; else undefined (Express). */
function fieldsOf(url: string, known: Map<string, FastList>): FastList | undefined {
  const list = url.slice(FIELDS_QUERY.length);
  const seen = known.get(list);
  if (seen !== undefined) return seen;
  if (!PLAIN_FIELDS.test(list)) return undefined;
  let fields: FieldSet | null;
  try {
    // What the Express route reads from the same query (the 'simple' parser: { fields: list }).
    ({ fields } = checkListQuery({ fields: list }));
  } catch {
    return undefined; // Express answers the 400
  }
  if (known.size >= MAX_KNOWN_FIELD_LISTS) known.clear();
  const asked: FastList = { filter: null, fields };
  known.set(list, asked);
  return asked;
}

/** Whether Express's body handling (requireJsonBody, express.json) would do nothing. */
export function bodiless(headers: IncomingHttpHeaders): boolean {
  if (headers['transfer-encoding'] !== undefined) return false;
  const length = headers['content-length'];
  return length === undefined || (length === '0' && headers['content-type'] === undefined);
}

/** The token, when requireScope(tokens, 'read') would let the request through; else null. */
export function readerOf(
  tokens: TokenStore,
  authorization: string | undefined,
): TokenIdentity | null {
  const token = bearerToken(authorization);
  if (token === null) return null;
  const identity = tokens.identify(token);
  return identity !== null && covers(identity.scope, 'read') ? identity : null;
}

/** What a fast path's request line says about its route, and where its duration goes. */
export interface FastTrace {
  logger: Logger;
  timer: RequestTimer | null;
  path: string;
  polled: boolean;
}

/**
 * A fast path's request once its token let it in, as Express's middleware would have it: the
 * request id, and on 'close' the request line (requestLog, with the token's name as
 * requireScope gives it) then the duration (requestMetrics), one listener for both, the line
 * and the duration of a finished or cut response in that order. Returns the request id.
 */
export function traceFastRequest(
  trace: FastTrace,
  req: IncomingMessage,
  res: ServerResponse,
  reader: TokenIdentity | null,
  started: bigint,
): string {
  const requestId = requestIdFrom(req.headers['x-request-id']);
  const context: RequestContext =
    reader === null ? { requestId } : { requestId, tokenName: reader.name };
  res.on('close', () => {
    logClosedResponse(
      trace.logger,
      req,
      res,
      trace.path,
      requestId,
      started,
      trace.polled,
      context,
    );
    if (trace.timer !== null) {
      trace.timer(res.statusCode, Number(process.hrtime.bigint() - started) / 1e9);
    }
  });
  return requestId;
}

/**
 * The error answer exactly as app.ts onError gives it through res.status().set().json(): the
 * envelope of toErrorResponse, X-Request-Id first (requestLog set it on arrival), the error's
 * own headers, then Content-Type and Content-Length as Express's res.send writes them.
 */
export function writeError(res: ServerResponse, response: ErrorResponse, requestId: string): void {
  const text = JSON.stringify(response.body);
  const headers: Array<string | number> = [REQUEST_ID_HEADER, requestId];
  for (const [name, value] of Object.entries(response.headers)) headers.push(name, value);
  headers.push(
    'Content-Type',
    'application/json; charset=utf-8',
    'Content-Length',
    Buffer.byteLength(text),
  );
  res.writeHead(response.status, headers);
  res.end(text);
}

export function listFastPath(options: ListFastPathOptions): FastPath {
  const { service, listBodies, logger } = options;
  const tokens = options.tokens ?? null;
  const timer: RequestTimer | null = options.metrics?.requestTimer('GET', LIST_ROUTE.label) ?? null;

  // A failed snapshot or build is answered here rather than handed to Express: Express would
  // call service.snapshot() again, a second kernel read (a failed one is not kept) counted a
  // second time in the kernel metrics, and this request's log line and duration would be
  // written twice.
  const answer = async (
    req: IncomingMessage,
    res: ServerResponse,
    { filter, fields }: FastList,
    requestId: string,
  ): Promise<void> => {
    try {
      const snapshot = await service.snapshot();
      const encoding = negotiateEncoding(req.headers['accept-encoding']);
      const body = await listBodies.body(snapshot, filter, encoding, fields);
      writeListResponse(res, requestId, body, encoding, snapshot.takenAt);
    } catch (error) {
      // Cannot happen (the 200 is written in one synchronous call, last); onError would hand
      // it to Express's final handler, which cuts the connection, so this does too.
      if (res.headersSent) {
        req.socket.destroy();
        return;
      }
      const response = toErrorResponse(error);
      if (response.serverFault) {
        logServerFault(logger, 'GET', LIST_PATH, requestId, response.body.code, error);
      }
      writeError(res, response, requestId);
    }
  };

  const knownFieldLists = new Map<string, FastList>();

  return (req, res) => {
    if (req.method !== 'GET') return false;
    const list = listOf(req.url, knownFieldLists);
    if (list === undefined) return false;
    const headers = req.headers;
    if (!bodiless(headers)) return false;
    const started = process.hrtime.bigint();
    const reader = tokens === null ? null : readerOf(tokens, headers.authorization);
    if (tokens !== null && reader === null) return false;
    const requestId = traceFastRequest(
      { logger, timer, path: LIST_PATH, polled: LIST_ROUTE.polled },
      req,
      res,
      reader,
      started,
    );
    // Inside the window with the body built (most polls): answered now, without a promise or
    // a trip through the microtask queue, the same bytes answer() would write.
    const snapshot = service.freshSnapshot();
    if (snapshot !== null) {
      const encoding = negotiateEncoding(headers['accept-encoding']);
      const body = listBodies.ready(snapshot, list.filter, encoding, list.fields);
      if (body !== null) {
        writeListResponse(res, requestId, body, encoding, snapshot.takenAt);
        return true;
      }
    }
    void answer(req, res, list, requestId);
    return true;
  };
}
