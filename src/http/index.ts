/**
 * The HTTP layer's face: `createHttpServer` puts the Express app (app.ts), the fast paths of
 * the list poll (list.ts) and of the event stream (events-fast-path.ts) and the Node server with
 * its limits (server.ts) together, sharing one ListBodies and one EventStreams, so main.ts
 * starts the API with one call. Loading this module loads no Express: the app (app.ts, Express
 * and the modules only it needs) is loaded on the first request the fast paths leave to it, or
 * once `appAfter` settled and no response is open, so a start answers its first list before
 * paying for them.
 * `createApp` itself is app.ts's (import it from there).
 */
import type http from 'node:http';
import type { AppOptions } from './app';
import { eventStreamHandler, holdForApiRequest, type EventStreamsApi } from './events';
import { eventsFastPath } from './events-fast-path';
import { listFastPath, type FastPath } from './list';
import { ListBodies } from './list-body';
import type { Metrics } from './metrics';
import { createServer, type HttpLimits } from './server';
import type { ApiServer } from './tls';
import type { TlsMaterial } from '../tls-files';

export type { AppOptions } from './app';
export { TokenStore, requireScope, type Scope, type ScopedTokens } from './auth';
export { DEFAULT_BODY_LIMIT_BYTES } from './body-limit';
export { CONFIG_NOT_STORED_MESSAGE } from './routes';
export { requestLog, REQUEST_ID_HEADER } from './request-log';
export { createMetrics, METRICS_CONTENT_TYPE, type Metrics, type MetricsOptions } from './metrics';
export { ROUTES, type RouteDef, type RouteId } from './routes';
export { openApiDocument } from './openapi';
export { createServer, DEFAULT_HTTP_LIMITS, type HttpLimits, type ServerOptions } from './server';
export { ListBodies } from './list-body';
export { listFastPath, type FastPath, type ListFastPathOptions } from './list';
export { eventStreamHandler, eventPayload, type EventStreamsApi } from './events';
export { eventsFastPath, type EventsFastPathOptions } from './events-fast-path';
export {
  clientCertificateSubject,
  registerTlsMetrics,
  replaceCertificate,
  TLS_EXPIRY_METRIC,
  type ApiServer,
} from './tls';

export interface HttpServerOptions extends AppOptions {
  /** The app's metrics, whose request timer the fast path feeds too. */
  metrics?: Pick<Metrics, 'handler' | 'requestMetrics' | 'requestTimer'>;
  /** The server's limits (issue 10); each left out keeps DEFAULT_HTTP_LIMITS'. */
  limits?: Partial<Omit<HttpLimits, 'bodyLimitBytes'>>;
  /** Serve HTTPS with these checked TLS files (src/tls-files.ts); plain HTTP when absent. */
  tls?: TlsMaterial | null;
  /** GET /api/events' streams: its Express handler and its fast path; absent: not served. */
  eventStreams?: EventStreamsApi;
  /**
   * Once this settles (the daemon: once its start's first read is done) and no response is
   * open (a first list writing its body), the app is loaded if no request needed it before;
   * absent: on the first request the fast paths leave to it.
   */
  appAfter?: Promise<unknown>;
}

/**
 * The daemon's HTTP server, not yet listening: every request the limits let through is tried
 * on the fast paths (the event stream, then the list poll), then the app; every one but a
 * stream's is counted in flight while it runs (the streams' turns yield to it). Each fast path is its
 * route's twin (list.ts, events-fast-path.ts), answering from the same ListBodies, EventStreams,
 * tokens, metrics and logger as the app.
 */
export function createHttpServer(options: HttpServerOptions): ApiServer {
  const { limits, tls, eventStreams, appAfter, ...app } = options;
  const api = {
    ...app,
    listBodies: app.listBodies ?? new ListBodies(),
    handlers:
      eventStreams === undefined
        ? app.handlers
        : { ...app.handlers, events: eventStreamHandler(eventStreams) },
  };
  const bodyLimit = app.bodyLimitBytes === undefined ? {} : { bodyLimitBytes: app.bodyLimitBytes };
  const { listener: express, load } = lazyApp(api);
  const list = listFastPath(api);
  const events =
    eventStreams === undefined ? null : eventsFastPath({ ...api, streams: eventStreams, express });
  // Every request but a stream's is counted in flight while it runs: the streams' work yields.
  const fastPath: FastPath =
    events === null || eventStreams === undefined
      ? list
      : (req, res) => {
          if (events(req, res)) return true;
          holdForApiRequest(eventStreams, res);
          return list(req, res);
        };
  const server = createServer(
    express,
    { ...limits, ...bodyLimit, logger: app.logger, tls: tls ?? null },
    fastPath,
  );
  if (appAfter !== undefined) loadWhenIdle(server, appAfter, load);
  return server;
}

/**
 * Calls `load` once `after` settled and no response is open: loading the app blocks the event
 * loop (seconds in the emulated VM), and a first list still writing its body then would wait.
 */
function loadWhenIdle(server: ApiServer, after: Promise<unknown>, load: () => void): void {
  let open = 0;
  let settled = false;
  let done = false;
  const maybeLoad = (): void => {
    if (!settled || open > 0 || done) return;
    done = true;
    server.off('request', onRequest);
    load();
  };
  const onRequest = (_req: http.IncomingMessage, res: http.ServerResponse): void => {
    open++;
    res.once('close', () => {
      open--;
      maybeLoad();
    });
  };
  server.on('request', onRequest);
  const settle = (): void => {
    settled = true;
    maybeLoad();
  };
  after.then(settle, settle);
}

/**
 * The Express app as a request listener loaded on first use: the first request it gets waits
 * for app.ts (Express, the routes, the OpenAPI document) to load and the app to be made; later
 * ones go straight to it. `load` loads it ahead of any request. A load that fails (a broken
 * installation) is logged and answers 500; the next request tries again.
 */
export function lazyApp(options: AppOptions): {
  listener: http.RequestListener;
  load: () => void;
} {
  let app: http.RequestListener | null = null;
  let loading: Promise<http.RequestListener> | null = null;
  const loaded = (): Promise<http.RequestListener> =>
    (loading ??= import('./app').then(
      ({ createApp }) => (app = createApp(options)),
      (error: unknown) => {
        loading = null;
        throw error;
      },
    ));
  const failed = (error: unknown): void =>
    options.logger.error(
      { event: 'app_load_failed', error: error instanceof Error ? error.message : String(error) },
      `loading the API's Express app failed: ${String(error)}`,
    );
  const listener: http.RequestListener = (req, res) => {
    if (app !== null) {
      app(req, res);
      return;
    }
    loaded().then(
      (ready) => ready(req, res),
      (error: unknown) => {
        failed(error);
        res.statusCode = 500;
        res.end();
      },
    );
  };
  return { listener, load: () => void loaded().catch(failed) };
}
