/**
 * The OpenAPI 3.1 document of the API (GET /api/openapi.json), generated from the route table
 * and the very ajv schemas that validate requests (schemas.ts). Scopes: every non-public
 * operation needs the bearer scheme; its scope is in `x-scope` and in the description, since
 * HTTP bearer has no OAuth-style scopes in OpenAPI.
 */
import type { ValidateFunction } from 'ajv';
import { eventPayload } from './events';
import { errorResponse, keyParams } from './schemas';
import { ROUTES, errorsOf, type RouteDef } from './routes';

type Json = Record<string, unknown>;

const REASONS: Readonly<Record<number, string>> = {
  400: 'Invalid request',
  401: 'No or wrong bearer token',
  403: 'The token may only read',
  404: 'Not found',
  409: 'Conflict with the state of the host',
  413: 'Request body too large',
  415: 'Request body is not JSON',
  500: 'Internal or kernel failure',
  503: 'The interface or a kernel facility is not usable',
};

/** The JSON Schema an ajv function was compiled from (ajv keeps it on `schema`). */
function schemaOf(validate: ValidateFunction<unknown>): Json {
  return validate.schema as Json;
}

function jsonContent(schema: Json): Json {
  return { 'application/json': { schema } };
}

function parameters(def: RouteDef): Json[] {
  const out: Json[] = [];
  if (def.openapiPath.includes('{publicKey}')) {
    const properties = schemaOf(keyParams as ValidateFunction<unknown>)['properties'] as Json;
    out.push({
      name: 'publicKey',
      in: 'path',
      required: true,
      description:
        "The peer's WireGuard public key, standard or URL-safe base64; percent-encode '/', '+' " +
        "and '='",
      schema: properties['publicKey'],
    });
  }
  if (def.query !== undefined) {
    const schema = schemaOf(def.query);
    const properties = (schema['properties'] ?? {}) as Json;
    const required = (schema['required'] ?? []) as string[];
    for (const [name, property] of Object.entries(properties)) {
      out.push({ name, in: 'query', required: required.includes(name), schema: property });
    }
  }
  return out;
}

function successContent(def: RouteDef): Json {
  switch (def.success.contentType) {
    case 'text/plain':
      return { 'text/plain': { schema: { type: 'string' } } };
    case 'text/html':
      return { 'text/html': { schema: { type: 'string' } } };
    case 'text/event-stream':
      // OpenAPI 3.1 has no schema for the events of a stream: the data of each is x-event-data.
      return {
        'text/event-stream': {
          schema: { type: 'string' },
          'x-event-data': { $ref: '#/components/schemas/Event' },
        },
      };
    default:
      return jsonContent(def.success.schema ?? { type: 'object' });
  }
}

function operation(def: RouteDef): Json {
  const responses: Json = {};
  const errors = errorsOf(def);
  if (!errors.has(def.success.status)) {
    responses[String(def.success.status)] = {
      description: def.success.description,
      content: successContent(def),
    };
  }
  for (const [status, codes] of errors) {
    responses[String(status)] = {
      description: `${REASONS[status] ?? 'Error'}: code ${codes.join(', ')}`,
      content: jsonContent(errorResponse(codes)),
    };
  }
  const scopeText =
    def.scope === 'public'
      ? 'No token needed.'
      : `Needs a bearer token of scope \`${def.scope}\`` +
        (def.scope === 'read'
          ? ' (read or admin token).'
          : ' (admin token; a read token gets 403).');
  const op: Json = {
    operationId: def.id,
    summary: def.summary,
    description: `${def.summary}. ${scopeText}`,
    'x-scope': def.scope,
    security: def.scope === 'public' ? [] : [{ bearer: [] }],
    responses,
  };
  const params = parameters(def);
  if (params.length > 0) op['parameters'] = params;
  if (def.body !== undefined) {
    // The empty-object bodies may be left out entirely.
    const schema = schemaOf(def.body);
    const required = Array.isArray(schema['required']) && schema['required'].length > 0;
    op['requestBody'] = { required, content: jsonContent(schema) };
  }
  return op;
}

export interface OpenApiInfo {
  version: string;
}

export function openApiDocument(info: OpenApiInfo): Json {
  const paths: Record<string, Json> = {};
  for (const def of ROUTES) {
    const path = (paths[def.openapiPath] ??= {});
    path[def.method] = operation(def);
  }
  return {
    openapi: '3.1.0',
    info: {
      title: 'wg-peerd',
      version: info.version,
      description:
        'Manages the peers of a WireGuard interface. Errors are JSON ' +
        '`{success: false, error, code[, details]}`; each response lists its codes. A ' +
        'route answers 401/403 only when token files are configured.',
    },
    paths,
    webhooks: {
      event: {
        post: {
          operationId: 'webhookEvent',
          summary: 'One event, POSTed to each target of --webhooks-file that wants its type',
          description:
            'Signed per the Standard Webhooks specification: webhook-id is the event id (the ' +
            'same on every retry), webhook-timestamp the attempt time in UNIX seconds, ' +
            'webhook-signature `v1,<base64 HMAC-SHA256>` of `<id>.<timestamp>.<body>` with the ' +
            "target's whsec_ secret. Answer 2xx: anything else, or no answer within 10 s, is " +
            'retried (first retry after 5 s, then doubling, for at most an hour).',
          parameters: ['webhook-id', 'webhook-timestamp', 'webhook-signature'].map((name) => ({
            name,
            in: 'header',
            required: true,
            schema: { type: 'string' },
          })),
          requestBody: {
            required: true,
            content: jsonContent({ $ref: '#/components/schemas/Event' }),
          },
          responses: { '200': { description: 'Received (any 2xx)' } },
        },
      },
    },
    components: {
      schemas: { Event: eventPayload },
      securitySchemes: {
        bearer: {
          type: 'http',
          scheme: 'bearer',
          description:
            'A token of --token-file (scope admin: everything) or --read-token-file (scope ' +
            'read: list, metrics, this document). Each operation names its scope in x-scope.',
        },
      },
    },
  };
}
