/**
 * The Express application of the API (SPEC §4, DESIGN §3). `createApp` builds it without
 * listening, so tests drive it with supertest.
 */
import express, {
  type ErrorRequestHandler,
  type NextFunction,
  type Request,
  type RequestHandler,
  type Response,
} from 'express';
import type { Logger } from '../log';
import type { ChangedPeer, CreatedPeer, PeerEntry, PeerServiceApi, ReadinessApi } from '../peers';
import { requireScope, type TokenStore } from './auth';
import { cutLongBodies } from './body-limit';
import { HttpError, toErrorResponse } from './errors';
import { ListBodies, negotiateEncoding } from './list-body';
import { probes } from './probes';
import { requestIdOf, requestLog } from './request-log';
import {
  check,
  checkPublicKey,
  dataCapBody,
  emptyBody,
  listQuery,
  speedLimitBody,
} from './schemas';

export interface AppOptions {
  service: PeerServiceApi;
  /** When set, every /api request needs `Authorization: Bearer <token>` of the route's scope. */
  tokens?: TokenStore | null;
  logger: Logger;
  /** Largest accepted request body; 4 KiB by default. */
  bodyLimitBytes?: number;
  /** The per-snapshot list bodies (DESIGN §5); injectable so tests can count builds. */
  listBodies?: ListBodies;
  /** Behind GET /readyz; without it only /healthz is served. */
  readiness?: ReadinessApi | null;
}

export const DEFAULT_BODY_LIMIT_BYTES = 4096;

/** GET /api/peer/<key>/config: SPEC §4.4, always 404. */
export const CONFIG_NOT_STORED_MESSAGE =
  "Peer configurations are not stored: a peer's private key is returned once, in the " +
  'response of POST /api/peer, and never kept';

type Handler = (req: Request, res: Response) => Promise<void>;

/** Hands a rejected promise to the error handler (express 4 does not). */
function route(handler: Handler): RequestHandler {
  return (req: Request, res: Response, next: NextFunction) => {
    handler(req, res).catch(next);
  };
}

function hasBody(req: Request): boolean {
  const length = req.headers['content-length'];
  return req.headers['transfer-encoding'] !== undefined || (length !== undefined && length !== '0');
}

/** 415 for a request body that is not declared as JSON. */
const requireJsonBody: RequestHandler = (req, _res, next) => {
  if (hasBody(req) && req.is('application/json') === false) {
    next(
      new HttpError(
        415,
        'UNSUPPORTED_MEDIA_TYPE',
        'Request bodies must be JSON: send Content-Type: application/json',
      ),
    );
    return;
  }
  next();
};

function keyOf(req: Request): string {
  const params = req.params as Record<string, string | undefined>;
  return checkPublicKey(params[0] ?? '');
}

/**
 * The reference twin of the list body (src/http/list-body.ts builds the same bytes without
 * these objects); the tests hold the two equal, so a field added here must be added there.
 */
export function toPeerJson(entry: PeerEntry) {
  return {
    public_key: entry.publicKey,
    ip_address: entry.ipAddress,
    last_handshake: entry.lastHandshake,
    minutes_since_handshake: entry.minutesSinceHandshake,
    status: entry.status,
    allowed_ips: entry.allowedIps,
    endpoint: entry.endpoint,
    rx_bytes: entry.rxBytes,
    tx_bytes: entry.txBytes,
    persistent_keepalive_seconds: entry.persistentKeepalive,
    speed_limit_bytes_per_second: entry.speedLimitBytesPerSecond,
    data_cap:
      entry.dataCap === null
        ? null
        : { quota_bytes: entry.dataCap.quotaBytes, used_bytes: entry.dataCap.usedBytes },
  };
}

export function toCreatedJson(created: CreatedPeer) {
  return {
    success: true as const,
    peer: { ip: created.ip, privateKey: created.privateKey, publicKey: created.publicKey },
    server: { publicKey: created.serverPublicKey, endpoint: created.endpoint },
    config: created.clientConfig,
  };
}

function named(peer: ChangedPeer): string {
  return peer.ip === null ? `peer ${peer.publicKey}` : `peer ${peer.publicKey} (${peer.ip})`;
}

export function createApp(options: AppOptions): express.Express {
  const { service, logger } = options;
  const listBodies = options.listBodies ?? new ListBodies();
  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false);
  app.set('query parser', 'simple');

  app.use(requestLog(logger));
  // Before authentication: probes need no token.
  app.use(probes(options.readiness ?? null));

  // Reads (GET, HEAD) need the read scope, everything else admin. The route table of the
  // http-api branch replaces this with each route's own scope.
  const tokens = options.tokens ?? null;
  const readScope = requireScope(tokens, 'read');
  const adminScope = requireScope(tokens, 'admin');
  app.use('/api', (req, res, next) =>
    (req.method === 'GET' || req.method === 'HEAD' ? readScope : adminScope)(req, res, next),
  );
  app.use(requireJsonBody);
  const bodyLimit = options.bodyLimitBytes ?? DEFAULT_BODY_LIMIT_BYTES;
  app.use(
    cutLongBodies(
      bodyLimit,
      express.json({ limit: bodyLimit, strict: true, type: 'application/json' }),
    ),
  );

  app.get(
    '/api/peers',
    route(async (req, res) => {
      const query = check(listQuery, req.query, 'query');
      const filter = query.status ?? null;
      const snapshot = await service.snapshot();
      const encoding = negotiateEncoding(req.headers['accept-encoding']);
      const body = await listBodies.body(snapshot, filter, encoding);
      // Age (RFC 9111 §5.1) in whole seconds for caches; X-Data-Age-Ms in milliseconds for
      // pollers that want to know precisely how old the data is (the freshness window).
      const ageMs = Math.max(0, Date.now() - snapshot.takenAt);
      res.writeHead(200, {
        'Content-Type': 'application/json; charset=utf-8',
        'Content-Length': body.length,
        Vary: 'Accept-Encoding',
        ...(encoding === 'identity' ? {} : { 'Content-Encoding': encoding }),
        Age: Math.floor(ageMs / 1000),
        'X-Data-Age-Ms': Math.round(ageMs),
      });
      res.end(body);
    }),
  );

  app.post(
    '/api/peer',
    route(async (req, res) => {
      check(emptyBody, req.body, 'body');
      const created = await service.createPeer();
      res.status(201).set('Cache-Control', 'no-store').json(toCreatedJson(created));
    }),
  );

  app.get(/^\/api\/peer\/(.+)\/config\/?$/, (_req, _res, next) => {
    next(new HttpError(404, 'CONFIG_NOT_STORED', CONFIG_NOT_STORED_MESSAGE));
  });

  app.patch(
    /^\/api\/peer\/(.+)\/speed-limit\/?$/,
    route(async (req, res) => {
      const key = keyOf(req);
      const { bytesPerSecond } = check(speedLimitBody, req.body, 'body');
      const peer = await service.setSpeedLimit(key, bytesPerSecond);
      res.json({
        success: true,
        message: `Speed limit of ${bytesPerSecond} bytes/s in each direction set for ${named(peer)}`,
      });
    }),
  );

  app.delete(
    /^\/api\/peer\/(.+)\/speed-limit\/?$/,
    route(async (req, res) => {
      const key = keyOf(req);
      check(emptyBody, req.body, 'body');
      const peer = await service.removeSpeedLimit(key);
      res.json({ success: true, message: `Speed limit removed from ${named(peer)}` });
    }),
  );

  app.patch(
    /^\/api\/peer\/(.+)\/data-cap\/?$/,
    route(async (req, res) => {
      const key = keyOf(req);
      const { quotaBytes } = check(dataCapBody, req.body, 'body');
      const peer = await service.setDataCap(key, quotaBytes);
      res.json({
        success: true,
        message: `Data cap of ${quotaBytes} bytes set for ${named(peer)}`,
      });
    }),
  );

  app.delete(
    /^\/api\/peer\/(.+)\/data-cap\/?$/,
    route(async (req, res) => {
      const key = keyOf(req);
      check(emptyBody, req.body, 'body');
      const peer = await service.removeDataCap(key);
      res.json({ success: true, message: `Data cap removed from ${named(peer)}` });
    }),
  );

  app.delete(
    /^\/api\/peer\/(.+?)\/?$/,
    route(async (req, res) => {
      const key = keyOf(req);
      check(emptyBody, req.body, 'body');
      const peer = await service.deletePeer(key);
      res.json({ success: true, message: `Deleted ${named(peer)}` });
    }),
  );

  app.use((req, _res, next) => {
    next(
      new HttpError(
        404,
        'ROUTE_NOT_FOUND',
        `There is no ${req.method} ${req.originalUrl.split('?')[0]}; the API is under /api (see the README)`,
      ),
    );
  });

  const onError: ErrorRequestHandler = (error: unknown, req, res, next) => {
    if (res.headersSent) {
      next(error);
      return;
    }
    const response = toErrorResponse(error);
    if (response.serverFault) {
      logger.error(
        {
          method: req.method,
          path: req.originalUrl.split('?')[0],
          requestId: requestIdOf(res),
          code: response.body.code,
          err: error instanceof Error ? error : String(error),
        },
        'request failed',
      );
    }
    res.status(response.status).set(response.headers).json(response.body);
  };
  app.use(onError);
  return app;
}
