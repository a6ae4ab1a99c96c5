/**
 * Request ids and the one log line per request (DESIGN §3, issue 9 "Logs"). Mounted first, so
 * every later middleware and the error handler find the id in `res.locals.requestId`.
 *
 * The id is the client's `X-Request-Id` when that is 1 to 128 characters of letters, digits and
 * `_ - . : @ / + =` (UUIDs, nginx's `$request_id`, trace ids), else a fresh UUID; anything else
 * (spaces, quotes, control characters, longer) is replaced rather than trusted into the log. It
 * is echoed in the `X-Request-Id` response header.
 *
 * Polls (the routes the route table marks `polled`: GET or HEAD of the list, /metrics, /healthz,
 * /readyz) that succeed are logged at `debug`: a monitoring system asking ten times a second
 * would otherwise write 864,000 lines a day at `info`. A poll that fails (status 400 and up),
 * and every other request, is at `info`.
 *
 * Each request has a context (issue 21): its id, and who made it once that is known (the
 * token's name, set by auth.ts). The request line carries it, and `logChanges` puts it on every
 * line logged while a change runs (the service's `peer_created`, `speed_limit_set`, ...), so a
 * change line says which request and which token made it; under mutual TLS (issue 22) also
 * which client certificate (its subject, set by `logChanges` for changes only).
 */
import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { RequestHandler, Response } from 'express';
import { withLogFields, type Logger } from '../log';
import { clientCertificateSubject } from './tls';

export const REQUEST_ID_HEADER = 'X-Request-Id';

const SANE_REQUEST_ID = /^[\w.:@/+=-]{1,128}$/;

/**
 * What the route table (routes.ts) says of the route a request matched, for its log line and
 * its duration series: set on the response when the route matches (app.ts), read when it closes.
 */
export interface RouteFacts {
  /** The route pattern, never the raw path (which holds a key): the metrics' route label. */
  readonly label: string;
  /** Asked by monitoring many times a second: a success is logged at debug. */
  readonly polled: boolean;
}

/** Marks the response with the facts of the route its request matched. */
export function markRoute(res: Response, facts: RouteFacts): void {
  res.locals['route'] = facts;
}

/** The facts markRoute set; undefined when no route matched (401 before routing, 404). */
export function routeOf(res: Response): RouteFacts | undefined {
  return res.locals['route'] as RouteFacts | undefined;
}

/** The client's id when it is sane, else a new one. */
export function requestIdFrom(header: string | string[] | undefined): string {
  return typeof header === 'string' && SANE_REQUEST_ID.test(header) ? header : randomUUID();
}

/** The id `requestLog` gave this response (undefined before it ran). */
export function requestIdOf(res: Response): string | undefined {
  const id: unknown = res.locals['requestId'];
  return typeof id === 'string' ? id : undefined;
}

/** Which request, and who made it: fields of its request line and of its change lines. */
export interface RequestContext {
  requestId: string;
  /** The bearer token's name (auth.ts: its file's name for it, else its fingerprint). */
  tokenName?: string;
  /** Under mutual TLS, the client certificate's subject: the machine that made a change. */
  clientCertificate?: string;
}

/** The context `requestLog` opened for this response (undefined before it ran). */
export function requestContextOf(res: Response): RequestContext | undefined {
  const context: unknown = res.locals['requestContext'];
  return typeof context === 'object' && context !== null ? (context as RequestContext) : undefined;
}

/** What one request line says. */
export interface RequestLine {
  method: string;
  /** The request's URL; the line keeps only its path (a query may hold anything). */
  path: string;
  status: number;
  ms: number;
  /** The TCP peer; behind a reverse proxy that is the proxy (the id links the two logs). */
  client: string | null;
  requestId: string;
  /** Who made it (requestContextOf), when known. */
  context?: RequestContext | undefined;
  /** The connection closed before the answer was all sent. */
  aborted: boolean;
  /** The route is polled (RouteFacts): a success is logged at debug. */
  polled: boolean;
}

/**
 * Writes the one line of a request, at debug for a successful poll, else at info. The one place
 * that shapes it, so that requests Express never sees (the server's own 413, server.ts) log
 * the same line as those it serves.
 */
/**
 * Whether the line of this request is written at debug: a successful poll. That level is off by
 * default, and then the line is not built at all (it was a few per cent of a poll of a small
 * list).
 */
function atDebug(polled: boolean, status: number): boolean {
  return polled && status < 400;
}

/** Whether logRequest would write nothing for this request (a debug line, debug off). */
function unlogged(logger: Logger, polled: boolean, status: number): boolean {
  return atDebug(polled, status) && !logger.isLevelEnabled('debug');
}

export function logRequest(logger: Logger, request: RequestLine): void {
  const path = request.path.split('?')[0] ?? '';
  if (unlogged(logger, request.polled, request.status)) return;
  const line = {
    method: request.method,
    path,
    status: request.status,
    ms: Math.round(request.ms * 1000) / 1000,
    client: request.client,
    ...request.context,
    requestId: request.requestId,
    ...(request.aborted ? { aborted: true } : {}),
  };
  if (atDebug(request.polled, request.status)) logger.debug(line, 'request');
  else logger.info(line, 'request');
}

/**
 * logRequest for a request whose response closed (finished or cut), its fields read off req and
 * res: the Express middleware below and the list fast path (list-fast-path.ts). `path` is
 * without the query; `started` is process.hrtime.bigint() at arrival; `polled` the route's fact.
 */
export function logClosedResponse(
  logger: Logger,
  req: IncomingMessage,
  res: ServerResponse,
  path: string,
  requestId: string,
  started: bigint,
  polled: boolean,
  context?: RequestContext,
): void {
  const method = req.method ?? '';
  // Decided before the line (and the socket's address, a system call) is made.
  if (unlogged(logger, polled, res.statusCode)) return;
  logRequest(logger, {
    method,
    path,
    status: res.statusCode,
    ms: Number(process.hrtime.bigint() - started) / 1e6,
    client: req.socket.remoteAddress ?? null,
    requestId,
    context,
    aborted: !res.writableFinished,
    polled,
  });
}

/** The error line of a request that failed by no fault of the client (app.ts onError). */
export function logServerFault(
  logger: Logger,
  method: string,
  path: string,
  requestId: string | undefined,
  code: string,
  error: unknown,
): void {
  logger.error(
    { method, path, requestId, code, err: error instanceof Error ? error : String(error) },
    'request failed',
  );
}

export function requestLog(logger: Logger): RequestHandler {
  return (req, res, next) => {
    const started = process.hrtime.bigint();
    const requestId = requestIdFrom(req.headers['x-request-id']);
    const context: RequestContext = { requestId };
    res.locals['requestId'] = requestId;
    res.locals['requestContext'] = context;
    res.setHeader(REQUEST_ID_HEADER, requestId);
    res.on('close', () => {
      const path = req.originalUrl.split('?')[0] ?? '';
      const polled = routeOf(res)?.polled ?? false;
      logClosedResponse(logger, req, res, path, requestId, started, polled, context);
    });
    next();
  };
}

/**
 * Mounted last before a change's handler (after authentication and the body): every line
 * logged while the change runs carries the request's context (log.ts withLogFields). Only
 * changes hold one, so polls keep Node's async hooks off.
 */
export const logChanges: RequestHandler = (req, res, next) => {
  const context = requestContextOf(res);
  if (context === undefined) {
    next();
    return;
  }
  const subject = clientCertificateSubject(req.socket);
  if (subject !== null) context.clientCertificate = subject;
  // A copy: the context is complete here, and a line must not change under the logger.
  const end = withLogFields({ ...context }, next);
  res.on('close', end);
};
