/**
 * Request ids and the one log line per request (DESIGN §3, issue 9 "Logs"). Mounted first, so
 * every later middleware and the error handler find the id in `res.locals.requestId`.
 *
 * The id is the client's `X-Request-Id` when that is 1 to 128 characters of letters, digits and
 * `_ - . : @ / + =` (UUIDs, nginx's `$request_id`, trace ids), else a fresh UUID; anything else
 * (spaces, quotes, control characters, longer) is replaced rather than trusted into the log. It
 * is echoed in the `X-Request-Id` response header.
 *
 * Polls (GET or HEAD of the list, /metrics, /healthz, /readyz) that succeed are logged at
 * `debug`: a monitoring system asking ten times a second would otherwise write 864,000 lines a
 * day at `info`. A poll that fails (status 400 and up), and every other request, is at `info`.
 */
import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { RequestHandler, Response } from 'express';
import type { Logger } from '../log';

export const REQUEST_ID_HEADER = 'X-Request-Id';

const SANE_REQUEST_ID = /^[\w.:@/+=-]{1,128}$/;

/** Paths polled by monitoring, without the query. */
export const POLLED_PATHS: readonly string[] = ['/api/peers', '/metrics', '/healthz', '/readyz'];

/** The client's id when it is sane, else a new one. */
export function requestIdFrom(header: string | string[] | undefined): string {
  return typeof header === 'string' && SANE_REQUEST_ID.test(header) ? header : randomUUID();
}

/** The id `requestLog` gave this response (undefined before it ran). */
export function requestIdOf(res: Response): string | undefined {
  const id: unknown = res.locals['requestId'];
  return typeof id === 'string' ? id : undefined;
}

export function isPoll(method: string, path: string): boolean {
  const trimmed = path.length > 1 && path.endsWith('/') ? path.slice(0, -1) : path;
  return (method === 'GET' || method === 'HEAD') && POLLED_PATHS.includes(trimmed);
}

/** The fields of the one line per request, in the order they are written. */
interface RequestLine {
  method: string;
  path: string;
  status: number;
  ms: number;
  client: string | null;
  requestId: string;
  aborted?: true;
}

/**
 * Writes the line of a request whose response closed (finished or cut): the one place that
 * decides its fields and level, for the Express middleware below and the list fast path
 * (list-fast-path.ts). `path` is without the query; `started` is process.hrtime.bigint() at
 * arrival.
 */
export function logRequest(
  logger: Logger,
  req: IncomingMessage,
  res: ServerResponse,
  path: string,
  requestId: string,
  started: bigint,
): void {
  const ms = Number(process.hrtime.bigint() - started) / 1e6;
  const method = req.method ?? '';
  const line: RequestLine = {
    method,
    path,
    status: res.statusCode,
    ms: Math.round(ms * 1000) / 1000,
    // The TCP peer; behind a reverse proxy that is the proxy (the id links the two logs).
    client: req.socket.remoteAddress ?? null,
    requestId,
  };
  if (!res.writableFinished) line.aborted = true;
  if (isPoll(method, path) && res.statusCode < 400) logger.debug(line, 'request');
  else logger.info(line, 'request');
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
    res.locals['requestId'] = requestId;
    res.setHeader(REQUEST_ID_HEADER, requestId);
    res.on('close', () => {
      logRequest(logger, req, res, req.originalUrl.split('?')[0] ?? '', requestId, started);
    });
    next();
  };
}
