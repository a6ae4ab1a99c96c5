/**
 * The route table (issue 9): every route of the API once, with its scope, its ajv schemas, its
 * success response and the error codes it can answer. createApp (app.ts) registers Express
 * routes from it and openapi.ts generates the OpenAPI document from it, so the two cannot drift.
 *
 * The table also holds each route's facts (RouteFacts): the label of its duration series and
 * whether monitoring polls it (its successes are logged at debug).
 *
 * A route without `handler` is documented here but served by a handler given to createApp
 * (AppOptions.handlers, or its own module: the list answer is list.ts's, the probes probes.ts's,
 * the OpenAPI document openapi.ts's, the metrics metrics.ts's). A route with neither is
 * documented only and not registered.
 */
import type { Request, RequestHandler, Response } from 'express';
import type { ValidateFunction } from 'ajv';
import { EVENT_TYPES } from '../events';
import type { ChangedPeer, CreatedPeer, PeerServiceApi } from '../peers';
import { HttpError } from './errors';
import { eventPayload, eventsQuery } from './events';
import type { RouteFacts } from './request-log';
import {
  check,
  capResetResponse,
  checkPublicKey,
  createBody,
  createdResponse,
  dataCapBody,
  emptyBody,
  listQuery,
  listResponse,
  messageResponse,
  nameBody,
  expiryBody,
  speedLimitBody,
  suspensionBody,
} from './schemas';

export type RouteId =
  | 'listPeers'
  | 'createPeer'
  | 'peerConfig'
  | 'setSpeedLimit'
  | 'removeSpeedLimit'
  | 'setDataCap'
  | 'removeDataCap'
  | 'resetDataCap'
  | 'setSuspension'
  | 'setName'
  | 'setExpiry'
  | 'deletePeer'
  | 'openapi'
  | 'docs'
  | 'healthz'
  | 'readyz'
  | 'metrics'
  | 'events';

/**
 * Who may call a route: anyone (the probes), a read token, or an admin token. The last two are
 * auth.ts's scopes (app.ts hands them to requireScope, so the compiler holds the two equal).
 */
export type RouteScope = 'public' | 'read' | 'admin';
export type Method = 'get' | 'post' | 'patch' | 'delete';

/** What route handlers work with. */
export interface RouteContext {
  service: PeerServiceApi;
}

export interface RouteResponse {
  status: number;
  description: string;
  contentType: 'application/json' | 'text/plain' | 'text/event-stream' | 'text/html';
  /** JSON Schema of the body; null for text. */
  schema: Readonly<Record<string, unknown>> | null;
}

export interface RouteDef extends RouteFacts {
  id: RouteId;
  method: Method;
  /** What Express matches; the key is the first capture group of a RegExp path. */
  expressPath: string | RegExp;
  /** The same path for OpenAPI; `{publicKey}` is the only path parameter. */
  openapiPath: string;
  scope: RouteScope;
  summary: string;
  query?: ValidateFunction<unknown>;
  body?: ValidateFunction<unknown>;
  success: RouteResponse;
  /** Error statuses and the `code`s each can carry, besides the common ones of errorsOf(). */
  errors: Readonly<Record<number, readonly string[]>>;
  handler?: (context: RouteContext) => RequestHandler;
}

/** GET /api/peer/<key>/config: SPEC §4.4, always 404. */
export const CONFIG_NOT_STORED_MESSAGE =
  "Peer configurations are not stored: a peer's private key is returned once, in the " +
  'response of POST /api/peer, and never kept';

type Handler = (req: Request, res: Response) => Promise<void>;

/**
 * Hands a rejected promise to the error handler. Express 5 would too for a handler that returns
 * its promise; this one returns nothing, so the answer does not depend on the Express version.
 */
function route(handler: Handler): RequestHandler {
  return (req, res, next) => {
    handler(req, res).catch(next);
  };
}

function keyOf(req: Request): string {
  const params = req.params as Record<string, string | undefined>;
  return checkPublicKey(params[0] ?? '');
}

function named(peer: ChangedPeer): string {
  return peer.ip === null ? `peer ${peer.publicKey}` : `peer ${peer.publicKey} (${peer.ip})`;
}

export function toCreatedJson(created: CreatedPeer) {
  return {
    success: true as const,
    // peer.ip stays the IPv4 address (SPEC.md); a dual-stack interface adds peer.ipv6.
    peer: {
      ip: created.ip,
      ...(created.ipv6 === null ? {} : { ipv6: created.ipv6 }),
      privateKey: created.privateKey,
      publicKey: created.publicKey,
      // Issue 31: returned here and in the config only, once.
      ...(created.presharedKey === null ? {} : { presharedKey: created.presharedKey }),
    },
    server: { publicKey: created.serverPublicKey, endpoint: created.endpoint },
    config: created.clientConfig,
  };
}

// Codes of the failures every route that reads or changes the kernel can meet (errors.ts of
// src/peers maps them to these statuses).
const UNAVAILABLE = [
  'INTERFACE_MISSING',
  'INTERFACE_NOT_WIREGUARD',
  'INTERFACE_HAS_NO_ADDRESS',
  'INTERFACE_HAS_NO_KEY',
  'FACILITY_MISSING',
] as const;
const KERNEL = ['KERNEL_ERROR'] as const;

const MESSAGE: RouteResponse = {
  status: 200,
  description: 'Done; `message` says what changed',
  contentType: 'application/json',
  schema: messageResponse,
};

const KEY_ERRORS = { 400: ['INVALID_PUBLIC_KEY'], 404: ['PEER_NOT_FOUND'] } as const;

/** A path without parameters: Express, OpenAPI and the label say it alike. */
function at(path: string): { expressPath: string; openapiPath: string; label: string } {
  return { expressPath: path, openapiPath: path, label: path };
}

function keyPath(suffix: string): { expressPath: RegExp; openapiPath: string; label: string } {
  return {
    // The key may hold '/', so it is matched greedily up to the known suffix.
    expressPath: new RegExp(
      `^\\/api\\/peer\\/(.+${suffix === '' ? '?' : ''})${suffix.replace(/\//g, '\\/')}\\/?$`,
    ),
    openapiPath: `/api/peer/{publicKey}${suffix}`,
    label: `/api/peer/:publicKey${suffix}`,
  };
}

function limitRoute(
  id: RouteId,
  method: 'patch' | 'delete',
  suffix: string,
  summary: string,
  body: ValidateFunction<unknown>,
  run: (context: RouteContext, req: Request) => Promise<string>,
): RouteDef {
  return {
    id,
    method,
    ...keyPath(suffix),
    polled: false,
    scope: 'admin',
    summary,
    body,
    success: MESSAGE,
    errors: {
      400: ['VALIDATION_FAILED', ...KEY_ERRORS[400]],
      404: KEY_ERRORS[404],
      409: ['PEER_HAS_NO_TUNNEL_ADDRESS', 'HOST_SETUP_CONFLICT'],
      500: KERNEL,
      503: UNAVAILABLE,
    },
    handler: (context) =>
      route(async (req, res) => {
        res.json({ success: true, message: await run(context, req) });
      }),
  };
}

export const ROUTES: readonly RouteDef[] = [
  {
    id: 'listPeers',
    method: 'get',
    ...at('/api/peers'),
    polled: true,
    scope: 'read',
    summary: 'List the peers with their traffic, liveness, speed limit and data cap',
    query: listQuery as ValidateFunction<unknown>,
    success: {
      status: 200,
      description:
        'The peers. `Age` (seconds) and `X-Data-Age-Ms` say how old the kernel read is; the ' +
        'body may be gzip or br encoded as Accept-Encoding allows',
      contentType: 'application/json',
      schema: listResponse,
    },
    errors: { 400: ['VALIDATION_FAILED'], 500: KERNEL, 503: UNAVAILABLE },
    // The answer is list.ts's (the Express route and the fast path of the poll).
  },
  {
    id: 'createPeer',
    method: 'post',
    ...at('/api/peer'),
    polled: false,
    scope: 'admin',
    summary: 'Create a peer; the response holds its private key, which is never kept',
    body: createBody as ValidateFunction<unknown>,
    success: {
      status: 201,
      description:
        'The new peer (on a dual-stack interface also `peer.ipv6`), the server and a wg-quick configuration for the client',
      contentType: 'application/json',
      schema: createdResponse,
    },
    errors: {
      400: ['VALIDATION_FAILED'],
      409: ['ADDRESS_POOL_EXHAUSTED', 'HOST_SETUP_CONFLICT'],
      500: [...KERNEL, 'PEER_CLEANUP_FAILED'],
      503: [...UNAVAILABLE, 'ENDPOINT_UNKNOWN'],
    },
    handler: ({ service }) =>
      route(async (req, res) => {
        const created = await service.createPeer(check(createBody, req.body, 'body'));
        res.status(201).set('Cache-Control', 'no-store').json(toCreatedJson(created));
      }),
  },
  {
    id: 'peerConfig',
    method: 'get',
    ...keyPath('/config'),
    polled: false,
    scope: 'read',
    summary: 'Always 404: client configurations are not stored',
    success: {
      status: 404,
      description: 'Never succeeds: the error CONFIG_NOT_STORED explains why',
      contentType: 'application/json',
      schema: null,
    },
    errors: { 404: ['CONFIG_NOT_STORED'] },
    handler: () => (_req, _res, next) => {
      next(new HttpError(404, 'CONFIG_NOT_STORED', CONFIG_NOT_STORED_MESSAGE));
    },
  },
  limitRoute(
    'setSpeedLimit',
    'patch',
    '/speed-limit',
    "Set the peer's speed limit in each direction",
    speedLimitBody as ValidateFunction<unknown>,
    async ({ service }, req) => {
      const key = keyOf(req);
      const { bytesPerSecond } = check(speedLimitBody, req.body, 'body');
      const peer = await service.setSpeedLimit(key, bytesPerSecond);
      return `Speed limit of ${bytesPerSecond} bytes/s in each direction set for ${named(peer)}`;
    },
  ),
  limitRoute(
    'removeSpeedLimit',
    'delete',
    '/speed-limit',
    "Remove the peer's speed limit",
    emptyBody as ValidateFunction<unknown>,
    async ({ service }, req) => {
      const key = keyOf(req);
      check(emptyBody, req.body, 'body');
      return `Speed limit removed from ${named(await service.removeSpeedLimit(key))}`;
    },
  ),
  limitRoute(
    'setDataCap',
    'patch',
    '/data-cap',
    "Set the peer's data cap (bytes in both directions together) and its billing period",
    dataCapBody as ValidateFunction<unknown>,
    async ({ service }, req) => {
      const key = keyOf(req);
      const body = check(dataCapBody, req.body, 'body');
      const peer = await service.setDataCap(key, body);
      const over =
        body.afterCap === 'throttle'
          ? `, throttled${body.throttleBytesPerSecond === undefined ? '' : ` to ${body.throttleBytesPerSecond} B/s`} over it`
          : body.afterCap === 'block'
            ? ', blocked over it'
            : '';
      return `Data cap${body.quotaBytes === undefined ? '' : ` of ${body.quotaBytes} bytes`} set for ${named(peer)}${over}`;
    },
  ),
  limitRoute(
    'removeDataCap',
    'delete',
    '/data-cap',
    "Remove the peer's data cap",
    emptyBody as ValidateFunction<unknown>,
    async ({ service }, req) => {
      const key = keyOf(req);
      check(emptyBody, req.body, 'body');
      return `Data cap removed from ${named(await service.removeDataCap(key))}`;
    },
  ),
  {
    id: 'resetDataCap',
    method: 'post',
    ...keyPath('/data-cap/reset'),
    polled: false,
    scope: 'admin',
    summary:
      "Reset the peer's data cap usage to zero now (read and reset in one step in the kernel)",
    body: emptyBody as ValidateFunction<unknown>,
    success: {
      status: 200,
      description: 'Done; `usedBytes` is the usage the reset closed',
      contentType: 'application/json',
      schema: capResetResponse,
    },
    errors: {
      400: ['VALIDATION_FAILED', ...KEY_ERRORS[400]],
      404: KEY_ERRORS[404],
      409: ['PEER_HAS_NO_DATA_CAP', 'PEER_HAS_NO_TUNNEL_ADDRESS', 'HOST_SETUP_CONFLICT'],
      500: KERNEL,
      503: UNAVAILABLE,
    },
    handler: ({ service }) =>
      route(async (req, res) => {
        const key = keyOf(req);
        check(emptyBody, req.body, 'body');
        const reset = await service.resetDataCap(key);
        res.json({
          success: true,
          message: `Data cap usage of ${named(reset)} reset; ${reset.usedBytes} bytes were used`,
          usedBytes: reset.usedBytes,
        });
      }),
  },
  limitRoute(
    'setSuspension',
    'patch',
    '/suspension',
    'Suspend the peer (no tunnelled packet passes either way) or resume it; key, addresses, counters, limit and cap are kept',
    suspensionBody as ValidateFunction<unknown>,
    async ({ service }, req) => {
      const key = keyOf(req);
      const { suspended } = check(suspensionBody, req.body, 'body');
      const peer = await service.setSuspension(key, suspended);
      return `${suspended ? 'Suspended' : 'Resumed'} ${named(peer)}`;
    },
  ),
  limitRoute(
    'setName',
    'patch',
    '/name',
    "Name the peer, rename it, or clear its name (null); shown as the list's `name`",
    nameBody as ValidateFunction<unknown>,
    async ({ service }, req) => {
      const key = keyOf(req);
      const { name } = check(nameBody, req.body, 'body');
      const peer = await service.setName(key, name);
      return name === null
        ? `Name of ${named(peer)} cleared`
        : `Name of ${named(peer)} set to ${JSON.stringify(name)}`;
    },
  ),
  limitRoute(
    'setExpiry',
    'patch',
    '/expiry',
    "Set, renew or clear (null) the peer's expiry: from then on the kernel passes no packet of it either way, whether or not wg-peerd runs; a later expiresAt or null lets it pass again at once",
    expiryBody as ValidateFunction<unknown>,
    async ({ service }, req) => {
      const key = keyOf(req);
      const { expiresAt } = check(expiryBody, req.body, 'body');
      const peer = await service.setExpiry(key, expiresAt);
      return expiresAt === null
        ? `Expiry of ${named(peer)} cleared`
        : `Expiry of ${named(peer)} set to ${new Date(Date.parse(expiresAt)).toISOString()}`;
    },
  ),
  {
    ...limitRoute(
      'deletePeer',
      'delete',
      '',
      'Delete the peer with its speed limit and data cap',
      emptyBody as ValidateFunction<unknown>,
      async ({ service }, req) => {
        const key = keyOf(req);
        check(emptyBody, req.body, 'body');
        return `Deleted ${named(await service.deletePeer(key))}`;
      },
    ),
    errors: {
      400: ['VALIDATION_FAILED', ...KEY_ERRORS[400]],
      404: KEY_ERRORS[404],
      409: ['HOST_SETUP_CONFLICT'],
      500: [...KERNEL, 'PEER_CLEANUP_FAILED'],
      503: UNAVAILABLE,
    },
  },
  {
    id: 'openapi',
    method: 'get',
    ...at('/api/openapi.json'),
    polled: false,
    scope: 'read',
    summary: 'This OpenAPI 3.1 document',
    success: {
      status: 200,
      description: 'The OpenAPI 3.1 document of this API',
      contentType: 'application/json',
      schema: {
        type: 'object',
        properties: {
          openapi: { const: '3.1.0' },
          info: { type: 'object' },
          paths: { type: 'object' },
        },
        required: ['openapi', 'info', 'paths'],
      },
    },
    errors: {},
  },
  {
    id: 'docs',
    method: 'get',
    ...at('/api/docs'),
    polled: false,
    scope: 'public',
    summary: 'A viewer of the OpenAPI document (Swagger UI, served from the package itself)',
    success: {
      status: 200,
      description:
        'An HTML page that shows /api/openapi.json; it loads nothing from any other origin. ' +
        'Public: it holds no data; it asks for a read token when the document needs one',
      contentType: 'text/html',
      schema: null,
    },
    errors: {},
  },
  {
    id: 'healthz',
    method: 'get',
    ...at('/healthz'),
    polled: true,
    scope: 'public',
    summary: 'Liveness: the process answers (no kernel call)',
    success: { status: 200, description: 'Alive', contentType: 'application/json', schema: null },
    errors: {},
  },
  {
    id: 'readyz',
    method: 'get',
    ...at('/readyz'),
    polled: true,
    scope: 'public',
    summary: 'Readiness: the interface is present and WireGuard, tc and nf_tables are usable',
    success: { status: 200, description: 'Ready', contentType: 'application/json', schema: null },
    errors: { 503: [...UNAVAILABLE] },
  },
  {
    id: 'metrics',
    method: 'get',
    ...at('/metrics'),
    polled: true,
    scope: 'read',
    summary: 'Prometheus metrics (text exposition format)',
    success: {
      status: 200,
      description: 'Prometheus text format 0.0.4',
      contentType: 'text/plain',
      schema: null,
    },
    errors: { 500: KERNEL, 503: UNAVAILABLE },
  },
  {
    id: 'events',
    method: 'get',
    ...at('/api/events'),
    polled: false,
    scope: 'read',
    summary: `Server-Sent Events: ${EVENT_TYPES.join(', ')}`,
    query: eventsQuery as ValidateFunction<unknown>,
    success: {
      status: 200,
      description:
        'A text/event-stream that stays open. Each event is `id:` (increasing), `event:` (its ' +
        'type) and one `data:` line of JSON (see x-event-data). Send `Last-Event-ID` to resume: ' +
        'the events missed are replayed from the history (--event-history), or one `reset` event ' +
        'says they cannot be (list again, then go on). A comment line every 15 s keeps proxies ' +
        'from closing an idle stream; a reader that falls too far behind, or takes nothing ' +
        'for --event-stream-stall, is disconnected and may resume. With --max-event-streams ' +
        'open, one more is 503 EVENT_STREAMS_FULL',
      contentType: 'text/event-stream',
      schema: eventPayload,
    },
    errors: { 400: ['VALIDATION_FAILED'], 503: ['EVENT_STREAMS_FULL'] },
  },
];

/** The body-parsing failures every /api route can answer (app.ts parses before routing). */
const BODY_ERRORS: Readonly<Record<number, readonly string[]>> = {
  400: ['INVALID_JSON', 'BAD_REQUEST'],
  413: ['BODY_TOO_LARGE'],
  415: ['UNSUPPORTED_MEDIA_TYPE'],
};

/**
 * Every error status of a route with its codes: the route's own, body parsing (/api routes),
 * authentication (with tokens configured), and INTERNAL_ERROR for what nothing expected.
 */
export function errorsOf(def: RouteDef): ReadonlyMap<number, readonly string[]> {
  const all = new Map<number, Set<string>>();
  const add = (status: number, codes: readonly string[]) => {
    const set = all.get(status) ?? new Set<string>();
    for (const code of codes) set.add(code);
    all.set(status, set);
  };
  for (const [status, codes] of Object.entries(def.errors)) add(Number(status), codes);
  if (def.openapiPath.startsWith('/api/')) {
    for (const [status, codes] of Object.entries(BODY_ERRORS)) add(Number(status), codes);
  }
  if (def.scope !== 'public') add(401, ['AUTH_REQUIRED', 'AUTH_INVALID']);
  if (def.scope === 'admin') add(403, ['FORBIDDEN_READ_ONLY']);
  add(500, ['INTERNAL_ERROR']);
  return new Map([...all].sort(([a], [b]) => a - b).map(([s, codes]) => [s, [...codes]]));
}

/** The route of `id` (the table holds each once). */
export function routeById(id: RouteId): RouteDef {
  const def = ROUTES.find((d) => d.id === id);
  if (def === undefined) throw new Error(`no route ${id} in the table`);
  return def;
}
