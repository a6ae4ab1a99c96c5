import { gunzipSync, brotliDecompressSync, inflateSync } from 'node:zlib';
import { Validator } from '@seriousme/openapi-schema-validator';
import Ajv2020, { type ValidateFunction } from 'ajv/dist/2020';
import { expect } from 'chai';
import request from 'supertest';
import { TokenStore } from '../../../src/http';
import { createApp } from '../../../src/http/app';
import { toPeerJson } from '../../support/peer-list';
import { openApiDocument } from '../../../src/http/openapi';
import { ROUTES, errorsOf, type RouteDef } from '../../../src/http/routes';
import { PeerService } from '../../../src/peers';
import { recordedResponses, type RecordedResponse } from '../../support/response-recorder';
import { FakeKernel } from '../support/fake-kernel';
import { captureLog } from '../support/log-capture';
import { expectError, setup } from './helpers';

const ADMIN = 'admin-token-0123456789abcdef';
const READER = 'read-token-0123456789abcdef';

type Json = Record<string, unknown>;

// The response schemas are checked as OpenAPI 3.1 reads them: JSON Schema 2020-12. Formats are
// not asserted (ajv-formats is not a dependency); everything else is.
const ajv = new Ajv2020({ strict: true, allErrors: true, validateFormats: false });
const document = openApiDocument({ version: '0.0.0-test' });
const compiled = new Map<object, ValidateFunction>();

function operationOf(def: RouteDef): Json {
  const paths = document['paths'] as Record<string, Record<string, Json>>;
  const op = paths[def.openapiPath]?.[def.method];
  if (op === undefined) throw new Error(`${def.method} ${def.openapiPath} is not in the document`);
  return op;
}

function pathRegExp(def: RouteDef): RegExp {
  if (def.expressPath instanceof RegExp) return def.expressPath;
  // Express matches string paths case-insensitively with an optional trailing slash.
  const escaped = def.expressPath.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&');
  return new RegExp(`^${escaped}\\/?$`, 'i');
}

/** The table's route for a request, first match as Express registers them. */
function routeOf(method: string, path: string): RouteDef | undefined {
  const m = method === 'HEAD' ? 'get' : method.toLowerCase();
  return ROUTES.find((def) => def.method === m && pathRegExp(def).test(path));
}

function decoded(response: RecordedResponse): string {
  const encoding = response.headers['content-encoding'];
  if (encoding === 'gzip') return gunzipSync(response.body).toString('utf8');
  if (encoding === 'br') return brotliDecompressSync(response.body).toString('utf8');
  if (encoding === 'deflate') return inflateSync(response.body).toString('utf8');
  return response.body.toString('utf8');
}

function validatorFor(schema: object): ValidateFunction {
  let validate = compiled.get(schema);
  if (validate === undefined) {
    validate = ajv.compile(schema);
    compiled.set(schema, validate);
  }
  return validate;
}

/** Problems of one recorded response against the document; empty when it conforms. */
function problemsOf(response: RecordedResponse): string[] {
  const label = `${response.method} ${response.path} → ${response.status}`;
  const def = routeOf(response.method, response.path);
  if (def === undefined) {
    // No route: the fallback answers 401/403 (token first), 405 METHOD_NOT_ALLOWED (a known
    // path, another method) or 404 ROUTE_NOT_FOUND.
    const body = JSON.parse(decoded(response)) as Json;
    const expected: Record<number, string[]> = {
      401: ['AUTH_REQUIRED', 'AUTH_INVALID'],
      403: ['FORBIDDEN_READ_ONLY'],
      404: ['ROUTE_NOT_FOUND'],
      405: ['METHOD_NOT_ALLOWED'],
      400: ['INVALID_JSON', 'BAD_REQUEST'],
      413: ['BODY_TOO_LARGE'],
      415: ['UNSUPPORTED_MEDIA_TYPE'],
    };
    return expected[response.status]?.includes(String(body['code']))
      ? []
      : [`${label}: an unrouted answer with code ${String(body['code'])}`];
  }
  const responses = operationOf(def)['responses'] as Record<string, Json>;
  const declared = responses[String(response.status)];
  if (declared === undefined) return [`${label}: status not declared for ${def.id}`];
  if (response.method === 'HEAD') return [];
  const content = declared['content'] as Record<string, { schema: object }>;
  const json = content['application/json'];
  if (json === undefined) return [];
  const validate = validatorFor(json.schema);
  if (validate(JSON.parse(decoded(response)))) return [];
  return [`${label} (${def.id}): ${ajv.errorsText(validate.errors)}`];
}

describe('OpenAPI document (GET /api/openapi.json)', () => {
  it('is a valid OpenAPI 3.1 document per @seriousme/openapi-schema-validator', async () => {
    const validator = new Validator();
    const result = await validator.validate(document);
    expect(result.errors, JSON.stringify(result.errors, null, 2)).to.equal(undefined);
    expect(result.valid).to.equal(true);
    expect(validator.version).to.equal('3.1');
  });

  it('is served to a read token and to an admin token, and refused without one', async () => {
    const { http } = setup({ tokens: { admin: [ADMIN], read: [READER] } });
    for (const token of [READER, ADMIN]) {
      const res = await http.get('/api/openapi.json').set('Authorization', `Bearer ${token}`);
      expect(res.status).to.equal(200);
      expect(res.headers['content-type']).to.match(/^application\/json/);
      expect(res.body.openapi).to.equal('3.1.0');
      expect(Object.keys(res.body.paths)).to.deep.equal(Object.keys(document['paths'] as Json));
    }
    expectError(await http.get('/api/openapi.json'), 401, 'AUTH_REQUIRED');
  });

  it("serves a documented-only route with the handler given to createApp, under the table's scope", async () => {
    const kernel = FakeKernel.withInterface();
    const log = captureLog();
    const app = createApp({
      service: new PeerService({
        kernel,
        interfaceName: 'wg0',
        endpointHost: 'vpn.example.net',
        logger: log.logger,
      }),
      tokens: new TokenStore({ admin: [ADMIN], read: [READER] }),
      logger: log.logger,
      handlers: {
        metrics: (_req, res) => {
          res.type('text/plain').send('# metrics\n');
        },
        healthz: (_req, res) => {
          res.json({ status: 'ok' });
        },
      },
    });
    // Not recorded: the unserved readyz answers 404, which no served readyz does.
    const http = request(app);
    expectError(await http.get('/metrics'), 401, 'AUTH_REQUIRED');
    const metrics = await http.get('/metrics').set('Authorization', `Bearer ${READER}`);
    expect(metrics.status).to.equal(200);
    expect(metrics.text).to.equal('# metrics\n');
    expect((await http.get('/healthz')).status).to.equal(200);
    // Not given: readyz stays unserved (documented for the branch that builds it).
    expectError(await http.get('/readyz'), 404, 'ROUTE_NOT_FOUND');
  });

  it('has every route of the table with its scope: x-scope, bearer security, description', () => {
    for (const def of ROUTES) {
      const op = operationOf(def);
      expect(op['x-scope'], def.id).to.equal(def.scope);
      expect(op['security'], def.id).to.deep.equal(def.scope === 'public' ? [] : [{ bearer: [] }]);
      expect(String(op['description'])).to.contain(
        def.scope === 'public' ? 'No token' : `scope \`${def.scope}\``,
      );
    }
    // SPEC/DESIGN §3: listing and reading need read, every change admin; probes are public.
    const scopes = Object.fromEntries(ROUTES.map((d) => [d.id, d.scope]));
    expect(scopes).to.deep.equal({
      listPeers: 'read',
      createPeer: 'admin',
      peerConfig: 'read',
      setSpeedLimit: 'admin',
      removeSpeedLimit: 'admin',
      setDataCap: 'admin',
      removeDataCap: 'admin',
      resetDataCap: 'admin',
      setSuspension: 'admin',
      setName: 'admin',
      setExpiry: 'admin',
      deletePeer: 'admin',
      openapi: 'read',
      docs: 'public',
      healthz: 'public',
      readyz: 'public',
      metrics: 'read',
      events: 'read',
    });
  });

  it('enumerates the error codes of each status in its error schema', () => {
    for (const def of ROUTES) {
      const responses = operationOf(def)['responses'] as Record<string, Json>;
      for (const [status, codes] of errorsOf(def)) {
        const content = responses[String(status)]?.['content'] as Json;
        const schema = (content['application/json'] as { schema: Json }).schema;
        const code = (schema['properties'] as Record<string, Json>)['code'];
        expect(code?.['enum'], `${def.id} ${status}`).to.deep.equal(codes);
      }
    }
    const create = operationOf(ROUTES.find((d) => d.id === 'createPeer')!);
    expect(Object.keys(create['responses'] as Json)).to.include.members([
      '201',
      '401',
      '403',
      '409',
      '503',
    ]);
  });

  it('describes every field toPeerJson gives a peer, and requires each', () => {
    const listed = toPeerJson({
      publicKey: Buffer.alloc(32, 1).toString('base64'),
      ipAddress: '10.0.0.2',
      ipv6Address: 'fd42::2',
      lastHandshake: '2026-03-01T12:00:00.000Z',
      minutesSinceHandshake: 0,
      status: 'ALIVE',
      allowedIps: ['10.0.0.2/32', 'fd42::2/128'],
      endpoint: '192.0.2.1:51820',
      rxBytes: 1,
      txBytes: 2,
      persistentKeepalive: 25,
      presharedKey: true,
      speedLimitBytesPerSecond: 125000,
      speedLimitHolds: 'both',
      dataCap: {
        quotaBytes: 1000,
        usedBytes: 1000,
        enforced: true,
        throttleBytesPerSecond: 5000,
        throttled: true,
      },
      suspended: true,
      exhaustedAt: '2026-03-01T11:59:00.000Z',
      capReadAt: '2026-03-01T12:00:00.000Z',
      name: 'laptop',
      expiresAt: '2026-12-31T23:59:59.000Z',
      expired: false,
    });
    const list = operationOf(ROUTES.find((d) => d.id === 'listPeers')!);
    const ok = ((list['responses'] as Json)['200'] as Json)['content'] as Json;
    const schema = (ok['application/json'] as { schema: Json }).schema;
    const peer = ((schema['properties'] as Json)['peers'] as Json)['items'] as Json;
    expect(Object.keys(peer['properties'] as Json)).to.deep.equal(Object.keys(listed));
    expect(peer['required']).to.deep.equal(Object.keys(listed));
    const body = { success: true, peers: [listed], total_count: 1, filter: null };
    expect(validatorFor(schema)(body)).to.equal(true);
    // And the schema is not vacuous: a missing field or a wrong type fails.
    const missing: Partial<typeof listed> = { ...listed };
    delete missing.data_cap;
    expect(validatorFor(schema)({ ...body, peers: [missing] })).to.equal(false);
    expect(validatorFor(schema)({ ...body, peers: [{ ...listed, rx_bytes: '1' }] })).to.equal(
      false,
    );
  });
});

// After every test file has run: each response the API tests (replay, peers-api, auth, scopes,
// request log, and the tests above) received is declared for its route and status, and its
// body matches the document's schema.
after('every recorded API response matches the OpenAPI document', function () {
  const problems = recordedResponses.flatMap(problemsOf);
  expect(problems, problems.slice(0, 20).join('\n')).to.deep.equal([]);
  const seen = new Set(
    recordedResponses.map((r) => `${routeOf(r.method, r.path)?.id ?? 'none'} ${r.status}`),
  );
  // Only meaningful when the API tests ran too (not under a --grep that skips them).
  if (recordedResponses.length > 50) {
    for (const wanted of ['listPeers 200', 'createPeer 201', 'deletePeer 200', 'createPeer 403']) {
      expect([...seen], wanted).to.include(wanted);
    }
  }
});
