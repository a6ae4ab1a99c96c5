/**
 * The HTTP server around the Express app, with the limits of issue 10 that Express cannot set:
 * an announced body over the limit is refused before a byte of it is read, header, request and
 * keep-alive timeouts, a cap on open connections, and JSON for requests Node's parser rejects.
 */
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import type { TLSSocket } from 'node:tls';
import type { Duplex } from 'node:stream';
import type { Logger } from '../log';
import { HttpError, toErrorResponse } from './errors';
import { DEFAULT_BODY_LIMIT_BYTES, announcedTooLarge, refuseBody } from './body-limit';
import { REQUEST_ID_HEADER, logRequest, requestIdFrom } from './request-log';
import type { FastPath } from './list';
import { httpsServerOptions, type ApiServer } from './tls';
import type { TlsMaterial } from '../tls-files';

export interface HttpLimits {
  /** Largest accepted request body. */
  bodyLimitBytes: number;
  /** Time for the request line and headers; slowloris clients are cut after it. */
  headersTimeoutMs: number;
  /** Time for the whole request, headers and body. */
  requestTimeoutMs: number;
  /** How long an idle keep-alive connection stays open between requests. */
  keepAliveTimeoutMs: number;
  /** Open connections at most; new ones over it are closed at once. */
  maxConnections: number;
  /** How often Node checks the two request timeouts (its default, 30 s, would triple them). */
  timeoutCheckIntervalMs: number;
}

/**
 * 10 s for headers: a real client sends them in one packet, even over a slow link.
 * 30 s per request: bodies here are at most 4 KiB and answers never wait on a client.
 * 5 s keep-alive (Node 20 adds 1 s of grace): Node's own default, longer than a poller's back-to-back requests need,
 * short enough that idle sockets do not pile up. 512 connections: far more than the
 * pollers and admin tools of one host, far less than the default 1,024 open files.
 */
export const DEFAULT_HTTP_LIMITS: Readonly<HttpLimits> = {
  bodyLimitBytes: DEFAULT_BODY_LIMIT_BYTES,
  headersTimeoutMs: 10_000,
  requestTimeoutMs: 30_000,
  keepAliveTimeoutMs: 5_000,
  maxConnections: 512,
  timeoutCheckIntervalMs: 1_000,
};

/** One whole HTTP/1.1 answer with a JSON body, for sockets no ServerResponse speaks on. */
export function rawJsonResponse(error: HttpError): string {
  const { status, body } = toErrorResponse(error);
  const text = JSON.stringify(body);
  return (
    `HTTP/1.1 ${status} ${http.STATUS_CODES[status] ?? ''}\r\n` +
    'Content-Type: application/json; charset=utf-8\r\n' +
    `Content-Length: ${Buffer.byteLength(text)}\r\n` +
    'Connection: close\r\n\r\n' +
    text
  );
}

/** The error Node's parser raised, by its code (HPE_* from llhttp, ERR_HTTP_* from Node). */
function clientErrorOf(error: NodeJS.ErrnoException): HttpError {
  switch (error.code) {
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      return new HttpError(
        408,
        'REQUEST_TIMEOUT',
        'The request did not arrive in time; send the headers and body without pausing',
      );
    case 'HPE_HEADER_OVERFLOW':
      return new HttpError(431, 'HEADERS_TOO_LARGE', 'The request headers are too large');
    case 'HPE_INVALID_METHOD':
      return new HttpError(
        400,
        'METHOD_NOT_SUPPORTED',
        'The request method is not one this API knows; it uses GET, POST, PATCH and DELETE',
      );
    default:
      return new HttpError(
        400,
        'BAD_REQUEST',
        `The request is not valid HTTP/1.1 (${error.code ?? 'parse error'})`,
      );
  }
}

/**
 * Whether the answer to the request on `socket` has begun (then only closing is left). Node
 * keeps the socket's current response as `_httpMessage` and its own default clientError
 * handler makes this same check; there is no public accessor.
 */
function answerStarted(socket: Duplex): boolean {
  const message: unknown = Reflect.get(socket, '_httpMessage');
  return message instanceof http.ServerResponse && message.headersSent;
}

export interface ServerOptions extends Partial<HttpLimits> {
  /** For the requests answered here, before the app (and its request log) sees them. */
  logger: Logger;
  /** Serve HTTPS with these checked TLS files (src/tls-files.ts); plain HTTP when absent. */
  tls?: TlsMaterial | null;
}

/**
 * One line for a request refused on its socket alone (no ServerResponse, so no request line):
 * who, and what they were told. `cause` is Node's reason (HPE_* from llhttp, ERR_HTTP_*).
 */
function logRefusal(
  logger: Logger,
  socket: Duplex,
  error: HttpError,
  detail: { method?: string; cause?: string },
): void {
  logger.info(
    {
      // Node types these sockets as Duplex; over TCP they are net.Sockets.
      client: socket instanceof net.Socket ? (socket.remoteAddress ?? null) : null,
      status: error.status,
      code: error.code,
      ...detail,
    },
    'request refused',
  );
}

/**
 * `fastPath`, when given, is tried before `app` for every request the limits let through
 * (list.ts: the common poll of the list, answered without Express).
 */
export function createServer(
  app: http.RequestListener,
  options: ServerOptions,
  fastPath: FastPath | null = null,
): ApiServer {
  const { logger, tls, ...limits } = options;
  const l: HttpLimits = { ...DEFAULT_HTTP_LIMITS, ...limits };
  const httpOptions: http.ServerOptions = {
    headersTimeout: l.headersTimeoutMs,
    requestTimeout: l.requestTimeoutMs,
    keepAliveTimeout: l.keepAliveTimeoutMs,
    connectionsCheckingInterval: l.timeoutCheckIntervalMs,
  };
  const server: ApiServer =
    tls === undefined || tls === null
      ? http.createServer(httpOptions)
      : https.createServer({ ...httpOptions, ...httpsServerOptions(tls, l.headersTimeoutMs) });
  server.maxConnections = l.maxConnections;
  if (server instanceof https.Server) {
    // A refused handshake never becomes a request: this is its one line. A client without a
    // certificate (OpenSSL refuses the handshake), plain HTTP sent to the HTTPS port
    // (ERR_SSL_HTTP_REQUEST), an old protocol...; a client certificate the CA did not sign is
    // refused by Node once OpenSSL is done (the socket destroyed: ECONNRESET, the verify error
    // in authorizationError). A client that leaves mid-handshake says nothing.
    server.on('tlsClientError', (error: NodeJS.ErrnoException, socket: TLSSocket) => {
      const unverified: unknown = socket.authorizationError;
      const code = typeof unverified === 'string' ? unverified : error.code;
      if (code === 'ECONNRESET') return;
      logger.info(
        { client: socket.remoteAddress ?? null, code: code ?? null },
        'TLS handshake refused',
      );
    });
  }

  // Refused before Express (and its body parser, which would read the body to its end first).
  const handle = (req: http.IncomingMessage, res: http.ServerResponse): void => {
    if (announcedTooLarge(req, l.bodyLimitBytes)) {
      // Express never sees this request: its id and its line (as request-log.ts writes them for
      // the app's requests) come from here, so an operator sees the refusal.
      const started = process.hrtime.bigint();
      const requestId = requestIdFrom(req.headers['x-request-id']);
      res.setHeader(REQUEST_ID_HEADER, requestId);
      res.on('close', () => {
        logRequest(logger, {
          method: req.method ?? '',
          path: req.url ?? '',
          status: res.statusCode,
          ms: Number(process.hrtime.bigint() - started) / 1e6,
          client: req.socket.remoteAddress ?? null,
          requestId,
          aborted: !res.writableFinished,
          polled: false,
        });
      });
      refuseBody(res, l.bodyLimitBytes);
      return;
    }
    if (fastPath !== null && fastPath(req, res)) return;
    app(req, res);
  };
  server.on('request', handle);
  // With a listener Node does not answer 100 Continue by itself: a client that waits for it
  // before sending an oversized body gets the 413 instead.
  server.on('checkContinue', (req: http.IncomingMessage, res: http.ServerResponse) => {
    if (!announcedTooLarge(req, l.bodyLimitBytes)) res.writeContinue();
    handle(req, res);
  });

  server.on('clientError', (error: NodeJS.ErrnoException, socket: Duplex) => {
    // Nothing is answered here, so nothing is logged: a reset is the client leaving, and an
    // answer already begun has its request line from the app when the socket closes.
    if (error.code === 'ECONNRESET' || !socket.writable || answerStarted(socket)) {
      socket.destroy();
      return;
    }
    const refusal = clientErrorOf(error);
    logRefusal(logger, socket, refusal, { cause: error.code ?? 'parse error' });
    socket.end(rawJsonResponse(refusal));
  });
  // CONNECT: no tunnels here. Without a listener Node would close the socket without a word.
  server.on('connect', (req: http.IncomingMessage, socket: Duplex) => {
    const refusal = new HttpError(
      405,
      'METHOD_NOT_ALLOWED',
      'CONNECT is not supported; this is not a proxy',
    );
    logRefusal(logger, socket, refusal, { method: req.method ?? 'CONNECT' });
    socket.end(rawJsonResponse(refusal));
  });
  return server;
}
