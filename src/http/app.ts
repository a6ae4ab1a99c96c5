/**
 * The Express application of the API (SPEC §4, DESIGN §3). `createApp` builds it without
 * listening, so tests drive it with supertest.
 */
import express, { type ErrorRequestHandler, type Request, type RequestHandler } from 'express';
import type { Logger } from '../log';
import type { PeerServiceApi, ReadinessApi } from '../peers';
import { requireScope, type TokenStore } from './auth';
import { DEFAULT_BODY_LIMIT_BYTES, cutLongBodies } from './body-limit';
import { BODY_ENCODING_REFUSED, HttpError, toErrorResponse } from './errors';
import { listRoute } from './list';
import { ListBodies } from './list-body';
import type { Metrics } from './metrics';
import { probes } from './probes';
import { logChanges, logServerFault, markRoute, requestIdOf, requestLog } from './request-log';
import { openApiDocument } from './openapi';
import { serveDocs } from './docs';
import { ROUTES, type RouteDef, type RouteId } from './routes';

export { CONFIG_NOT_STORED_MESSAGE, toCreatedJson } from './routes';

export interface AppOptions {
  service: PeerServiceApi;
  /** When set, every /api request needs `Authorization: Bearer <token>` of the route's scope. */
  tokens?: TokenStore | null;
  logger: Logger;
  /** Largest accepted request body; 4 KiB by default. */
  bodyLimitBytes?: number;
  /** The per-snapshot list bodies (DESIGN §5); injectable so tests can count builds. */
  listBodies?: ListBodies;
  /** GET /metrics and per-request timings (src/http/metrics.ts); absent: no /metrics. */
  metrics?: Pick<Metrics, 'handler' | 'requestMetrics'>;
  /** Handlers of routes the table documents without serving (routes.ts): probes, metrics. */
  handlers?: Partial<Record<RouteId, RequestHandler>>;
  /** The daemon's version, for the OpenAPI document's info. */
  version?: string;
  /** Behind GET /readyz; without it only /healthz is served. */
  readiness?: ReadinessApi | null;
}

function hasBody(req: Request): boolean {
  const length = req.headers['content-length'];
  return req.headers['transfer-encoding'] !== undefined || (length !== undefined && length !== '0');
}

/**
 * Whether express.json would read the request's body: type-is's hasBody, which the parser asks
 * first (a Transfer-Encoding, or any numeric Content-Length, "0" included: a zero-length JSON
 * body still has its charset and encoding checked). Without one the parser leaves req.body alone.
 */
function parserReads(req: Request): boolean {
  const length = req.headers['content-length'];
  return (
    req.headers['transfer-encoding'] !== undefined ||
    (length !== undefined && !Number.isNaN(Number(length)))
  );
}

/**
 * The Content-Encodings of a request body that express.json inflates, as Express 4's parser did:
 * Express 5's also takes br (and zstd where Node has it), which the API never accepted. An empty
 * header is identity, as both parsers read it.
 */
const BODY_ENCODINGS: ReadonlySet<string> = new Set(['identity', 'gzip', 'deflate', '']);

/** 415 for a request body that is not declared as JSON, or in an encoding the API refuses. */
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
  // As the parser would (a zero-length JSON body is decoded too).
  const encoding = (req.headers['content-encoding'] ?? 'identity').toLowerCase();
  if (
    parserReads(req) &&
    typeof req.is('application/json') === 'string' &&
    !BODY_ENCODINGS.has(encoding)
  ) {
    next(new HttpError(415, 'UNSUPPORTED_MEDIA_TYPE', BODY_ENCODING_REFUSED));
    return;
  }
  next();
};

/** The document is built once per app: the table does not change while it runs. */
function serveOpenApi(version: string): RequestHandler {
  let body: string | null = null;
  return (_req, res) => {
    body ??= JSON.stringify(openApiDocument({ version }));
    res.type('application/json').send(body);
  };
}

/** Each path of `routes` with the methods it takes, upper case, HEAD beside GET. */
export function allowedMethods(routes: readonly RouteDef[]): Map<string | RegExp, string[]> {
  const byPath = new Map<string, { path: string | RegExp; methods: Set<string> }>();
  for (const def of routes) {
    const key = String(def.expressPath);
    const entry = byPath.get(key) ?? { path: def.expressPath, methods: new Set<string>() };
    entry.methods.add(def.method.toUpperCase());
    if (def.method === 'get') entry.methods.add('HEAD');
    byPath.set(key, entry);
  }
  const order = ['GET', 'HEAD', 'POST', 'PATCH', 'DELETE'];
  return new Map(
    [...byPath.values()].map(({ path, methods }) => [
      path,
      order.filter((method) => methods.has(method)),
    ]),
  );
}

export function createApp(options: AppOptions): express.Express {
  const { service, logger } = options;
  const listBodies = options.listBodies ?? new ListBodies();
  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false);
  app.set('query parser', 'simple');

  app.use(requestLog(logger));
  if (options.metrics) app.use(options.metrics.requestMetrics);
  // Each route's own scope from the table, checked before its body is parsed.
  const tokens = options.tokens ?? null;
  // express.json alone reads a whole over-long body before its 413: cut it at the limit instead.
  const bodyLimit = options.bodyLimitBytes ?? DEFAULT_BODY_LIMIT_BYTES;
  const parseJson = cutLongBodies(
    bodyLimit,
    express.json({ limit: bodyLimit, strict: true, type: 'application/json' }),
  );
  // Express 5's parser leaves req.body undefined when there is no body; Express 4's gave {},
  // and the routes check a missing body as the empty object it was (POST /api/peer with no
  // body creates a peer; a bodiless DELETE passes the empty-body schema).
  const bodyOrEmpty: RequestHandler = (req, _res, next) => {
    req.body ??= {};
    next();
  };
  const given: Partial<Record<RouteId, RequestHandler>> = {
    listPeers: listRoute({ service, listBodies }),
    openapi: serveOpenApi(options.version ?? 'unknown'),
    docs: serveDocs(),
    ...probes(options.readiness ?? null),
    ...(options.metrics ? { metrics: options.metrics.handler } : {}),
    ...options.handlers,
  };
  const registered: RouteDef[] = [];
  for (const def of ROUTES) {
    const handler = given[def.id] ?? def.handler?.({ service });
    if (handler === undefined) continue; // documented only (served by another branch's piece)
    registered.push(def);
    // First: the route's facts for its log line and duration series, even when refused.
    const chain: RequestHandler[] = [
      (_req, res, next) => {
        markRoute(res, def);
        next();
      },
    ];
    // Public routes (the probes) need no token.
    if (def.scope !== 'public') chain.push(requireScope(tokens, def.scope));
    if (def.openapiPath.startsWith('/api/')) chain.push(requireJsonBody, parseJson, bodyOrEmpty);
    // Change lines name the request and the token (request-log.ts); reads need no context.
    if (def.method !== 'get') chain.push(logChanges);
    app[def.method](def.expressPath, ...chain, handler);
  }

  // An unknown /api path still needs a token (reads: read scope, others: admin), so that the
  // 404 says nothing about the API to a client without one.
  const readScope = requireScope(tokens, 'read');
  const adminScope = requireScope(tokens, 'admin');
  app.use('/api', (req, res, next) =>
    (req.method === 'GET' || req.method === 'HEAD' ? readScope : adminScope)(req, res, next),
  );

  // A known path with a method it does not take: 405 with the methods it does take (RFC 9110
  // §15.5.6); HEAD goes with GET, as Express serves it.
  for (const [expressPath, methods] of allowedMethods(registered)) {
    app.all(expressPath, (req, _res, next) => {
      const allow = methods.join(', ');
      next(
        new HttpError(
          405,
          'METHOD_NOT_ALLOWED',
          `${req.method} is not allowed on ${req.originalUrl.split('?')[0]}; it takes ${allow}`,
          { Allow: allow },
        ),
      );
    });
  }

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
      logServerFault(
        logger,
        req.method,
        req.originalUrl.split('?')[0] ?? '',
        requestIdOf(res),
        response.body.code,
        error,
      );
    }
    res.status(response.status).set(response.headers).json(response.body);
  };
  app.use(onError);
  return app;
}
