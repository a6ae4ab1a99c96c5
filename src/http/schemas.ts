/**
 * ajv schemas for every body, query and path parameter the API takes, and the translation of
 * ajv's findings into a ValidationError with `details`.
 */
import Ajv, { type AnySchema, type ErrorObject, type ValidateFunction } from 'ajv';
import {
  ALIVE,
  CLIENT_ALLOWED_IPS_MAX_ITEMS,
  CLIENT_DNS_MAX_ITEMS,
  CLIENT_KEEPALIVE_MAX,
  CLIENT_MTU_MAX,
  CLIENT_MTU_MIN,
  type CreateOptions,
  NAME_MAX_BYTES,
  EXPIRES_AT_PATTERN,
  NAME_MAX_LENGTH,
  NAME_PATTERN,
  DATA_CAP_MAX,
  DEAD,
  NO_HANDSHAKE,
  DATA_CAP_MIN,
  PERIODS,
  PERIOD_START_PATTERN,
  PUBLIC_KEY_PATTERN,
  type Period,
  SPEED_LIMIT_MAX,
  SPEED_LIMIT_MIN,
  THROTTLE_MAX,
  THROTTLE_MIN,
  ValidationError,
  parsePublicKey,
  type FilterStatus,
  type ValidationDetail,
} from '../peers';

/**
 * The one ajv instance of the daemon (events.ts compiles its query with it too). validateSchema is
 * off: checking a schema against draft-07's meta-schema makes ajv compile that meta-schema first,
 * 4.6 s of a 32 s daemon start in the test VM (two instances did it twice), for schemas that are
 * constants of this file. test/unit/http/schemas-meta.test.ts checks every schema of the route
 * table against the meta-schema instead; strict mode still refuses unknown keywords at compile.
 */
export const ajv = new Ajv({ allErrors: true, strict: true, validateSchema: false });

/**
 * A validator whose schema ajv compiles on its first call, not when this module loads (issue
 * 29): the first list after a start (the list's fast path) validates nothing, and compiling the
 * API's schemas was most of this module's load in a profile of the start (ajv's code generator
 * running cold). Callers see ajv's function: the verdict, `errors` after each call, `schema`.
 * Every schema still compiles in strict mode: test/unit/http/schemas-on-use.test.ts compiles
 * each, as the start used to.
 */
export function compiledOnUse<T>(schema: AnySchema): ValidateFunction<T> {
  let compiled: ValidateFunction<T> | null = null;
  const validate = ((data: unknown): data is T => {
    compiled ??= ajv.compile<T>(schema);
    const valid = compiled(data);
    validate.errors = compiled.errors;
    return valid;
  }) as ValidateFunction<T>;
  validate.schema = schema;
  return validate;
}

export interface ListQuery {
  status?: FilterStatus;
  fields?: string;
  name?: string;
}
export type EmptyBody = Record<string, never>;
export interface KeyParams {
  publicKey: string;
}
export interface SpeedLimitBody {
  bytesPerSecond: number;
}
export interface DataCapBody {
  quotaBytes?: number;
  period?: Period | null;
  periodStart?: string;
  afterCap?: 'block' | 'throttle';
  throttleBytesPerSecond?: number;
}

/** Bodies of POST /api/peer and of the DELETEs: nothing, or an empty object. */
export const emptyBody: ValidateFunction<EmptyBody> = compiledOnUse<EmptyBody>({
  type: 'object',
  properties: {},
  additionalProperties: false,
});

export const keyParams: ValidateFunction<KeyParams> = compiledOnUse<KeyParams>({
  type: 'object',
  properties: { publicKey: { type: 'string', maxLength: 64, pattern: PUBLIC_KEY_PATTERN } },
  required: ['publicKey'],
  additionalProperties: false,
});

export const speedLimitBody: ValidateFunction<SpeedLimitBody> = compiledOnUse<SpeedLimitBody>({
  type: 'object',
  properties: {
    bytesPerSecond: { type: 'integer', minimum: SPEED_LIMIT_MIN, maximum: SPEED_LIMIT_MAX },
  },
  required: ['bytesPerSecond'],
  additionalProperties: false,
});

/**
 * PATCH .../data-cap: every field optional (a field left out keeps its value; a peer without a
 * cap needs quotaBytes, which the service checks against the kernel).
 */
export const dataCapBody: ValidateFunction<DataCapBody> = compiledOnUse<DataCapBody>({
  type: 'object',
  properties: {
    quotaBytes: { type: 'integer', minimum: DATA_CAP_MIN, maximum: DATA_CAP_MAX },
    period: {
      type: ['string', 'null'],
      enum: [...PERIODS, null],
      description: 'Usage resets every period; null ends the period',
    },
    periodStart: {
      type: 'string',
      pattern: PERIOD_START_PATTERN,
      description:
        'ISO 8601 time with an offset (Z or ±hh:mm): resets fall at periodStart + k periods, calendar months clamped to the month end. Default: the time of the request',
    },
    afterCap: {
      type: 'string',
      enum: ['block', 'throttle'],
      description:
        "Over the cap: block (the default for a new cap) drops the peer's traffic; throttle " +
        'slows it to throttleBytesPerSecond each way, in the kernel, until the next reset or a ' +
        'raise. Left out: kept as it is.',
    },
    throttleBytesPerSecond: {
      type: 'integer',
      minimum: THROTTLE_MIN,
      maximum: THROTTLE_MAX,
      description:
        'With afterCap "throttle" (required for a cap that does not throttle yet); alone, the new rate of a cap that throttles',
    },
  },
  additionalProperties: false,
});

export type CreateBody = CreateOptions;

/**
 * POST /api/peer (issue 31): every field optional; none, or `{}`, is the peer every create
 * made before. The shapes are checked here, the addresses and prefixes by the domain
 * (src/peers/client-options.ts), both answering 400 with `details`.
 */
/** An expiry (issue 31): ISO 8601 with a UTC offset; the domain checks it is a future instant. */
const EXPIRES_AT_SCHEMA = { type: 'string', pattern: EXPIRES_AT_PATTERN, maxLength: 40 } as const;

/**
 * A peer's name (issue 31): 1 to 64 characters without control characters, and at most
 * NAME_MAX_BYTES of UTF-8 (checked by the domain, src/peers/names.ts).
 */
const NAME_SCHEMA = {
  type: 'string',
  minLength: 1,
  maxLength: NAME_MAX_LENGTH,
  pattern: NAME_PATTERN,
  description: `At most ${NAME_MAX_BYTES} bytes in UTF-8 as well: the kernel keeps the name, with its owner's key, in the 256 bytes of an nf_tables element's userdata`,
} as const;

export const createBody: ValidateFunction<CreateBody> = compiledOnUse<CreateBody>({
  type: 'object',
  properties: {
    name: {
      ...NAME_SCHEMA,
      description:
        "The peer's name (1 to 64 characters, no control characters): listed as `name`, filtered by `GET /api/peers?name=`, changed by PATCH .../name",
    },
    expiresAt: {
      ...EXPIRES_AT_SCHEMA,
      description:
        'When the peer expires: ISO 8601 with a UTC offset (2026-12-31T23:59:59Z), in the future, at most about 584 years ahead. From then on the kernel passes no packet of the peer either way, whether or not wg-peerd runs; listed as `expires_at` and `expired`, changed by PATCH .../expiry',
    },
    presharedKey: {
      type: 'boolean',
      description:
        'true: the peer gets a preshared key (32 random bytes), returned once as peer.presharedKey and in the config; false: none even with --preshared-keys. Left out: --preshared-keys decides',
    },
    dns: {
      type: 'array',
      maxItems: CLIENT_DNS_MAX_ITEMS,
      items: { type: 'string', maxLength: 45, description: 'An IPv4 or IPv6 address' },
      description:
        "The client's DNS servers (the config's `DNS =` line); [] writes none. Left out: --client-dns",
    },
    allowedIps: {
      type: 'array',
      minItems: 1,
      maxItems: CLIENT_ALLOWED_IPS_MAX_ITEMS,
      items: { type: 'string', maxLength: 49, description: 'An IPv4 or IPv6 CIDR' },
      description:
        'What the client routes through the tunnel (the config\'s `AllowedIPs =`), e.g. ["0.0.0.0/0", "::/0"] for a full tunnel. Left out: --client-allowed-ips, else the interface\'s subnet (everything, on a dual-stack interface)',
    },
    mtu: {
      type: 'integer',
      minimum: CLIENT_MTU_MIN,
      maximum: CLIENT_MTU_MAX,
      description: "The client's `MTU =`. Left out: --client-mtu, else no line",
    },
    persistentKeepalive: {
      type: 'integer',
      minimum: 0,
      maximum: CLIENT_KEEPALIVE_MAX,
      description:
        "The client's `PersistentKeepalive =` in seconds; 0 writes none (off). Left out: --client-keepalive (25)",
    },
  },
  additionalProperties: false,
});

export interface NameBody {
  name: string | null;
}

/** PATCH .../name (issue 31): a name, or null to clear it. */
export const nameBody: ValidateFunction<NameBody> = compiledOnUse<NameBody>({
  type: 'object',
  properties: {
    name: {
      anyOf: [NAME_SCHEMA, { type: 'null' }],
      description: 'The new name (1 to 64 characters, no control characters); null clears it',
    },
  },
  required: ['name'],
  additionalProperties: false,
});

export interface ExpiryBody {
  expiresAt: string | null;
}

/** PATCH .../expiry (issue 31): a new expiry (a renewal), or null to clear it. */
export const expiryBody: ValidateFunction<ExpiryBody> = compiledOnUse<ExpiryBody>({
  type: 'object',
  properties: {
    expiresAt: {
      anyOf: [EXPIRES_AT_SCHEMA, { type: 'null' }],
      description:
        'The new expiry (ISO 8601 with a UTC offset, in the future): the peer passes again at once until then; null: it never expires',
    },
  },
  required: ['expiresAt'],
  additionalProperties: false,
});

export interface SuspensionBody {
  suspended: boolean;
}

export const suspensionBody: ValidateFunction<SuspensionBody> = compiledOnUse<SuspensionBody>({
  type: 'object',
  properties: { suspended: { type: 'boolean' } },
  required: ['suspended'],
  additionalProperties: false,
});

export type Part = 'body' | 'query' | 'path';

function detailOf(error: ErrorObject): ValidationDetail {
  const params = error.params as Record<string, unknown>;
  if (error.keyword === 'additionalProperty' || error.keyword === 'additionalProperties') {
    const name = String(params['additionalProperty']);
    return { field: `${error.instancePath}/${name}`, message: 'is not a known field' };
  }
  if (error.keyword === 'required') {
    const name = String(params['missingProperty']);
    return { field: `${error.instancePath}/${name}`, message: 'is required' };
  }
  if (error.keyword === 'enum') {
    const allowed = (params['allowedValues'] as unknown[]).map(String).join(', ');
    return { field: error.instancePath, message: `must be one of ${allowed}` };
  }
  return { field: error.instancePath, message: error.message ?? 'is invalid' };
}

const PART_NAMES: Readonly<Record<Part, string>> = {
  body: 'request body',
  query: 'query',
  path: 'path',
};

/** Returns the value typed by its schema, or throws ValidationError (400). */
export function check<T>(validate: ValidateFunction<T>, value: unknown, part: Part): T {
  if (validate(value)) return value;
  const details = (validate.errors ?? []).map(detailOf);
  const first = details[0];
  const where = first && first.field !== '' ? `${first.field.replace(/^\//, '')} ` : '';
  const sentence = first ? `${where}${first.message}` : 'is invalid';
  throw new ValidationError(`Invalid ${PART_NAMES[part]}: ${sentence}`, details);
}

/** The percent-decoded public key of a path, canonical standard base64 (or 400). */
export function checkPublicKey(raw: string): string {
  if (!keyParams({ publicKey: raw })) {
    // Same pattern, so this throws the explanatory INVALID_PUBLIC_KEY error.
    parsePublicKey(raw);
  }
  return parsePublicKey(raw);
}

/*
 * Response schemas (JSON Schema 2020-12 compatible, the dialect of OpenAPI 3.1). They are not
 * used to validate responses at run time; the OpenAPI document (openapi.ts) publishes them and
 * the tests check real responses against them.
 */
type JsonSchema = Readonly<Record<string, unknown>>;

const nullable = (schema: JsonSchema): JsonSchema => ({ anyOf: [schema, { type: 'null' }] });
const BYTES: JsonSchema = { type: 'integer', minimum: 0 };
const TIME_UTC: JsonSchema = { type: 'string', format: 'date-time' };

/** One peer of the list: every field list-body.ts writes (and the test oracle gives). */
export const peerResponse: JsonSchema = {
  type: 'object',
  properties: {
    public_key: { type: 'string', pattern: PUBLIC_KEY_PATTERN },
    ip_address: nullable({ type: 'string', description: 'First IPv4 /32 allowed IP' }),
    ipv6_address: nullable({ type: 'string', description: 'First IPv6 /128 allowed IP' }),
    last_handshake: nullable({ type: 'string', format: 'date-time' }),
    minutes_since_handshake: nullable({ type: 'integer', minimum: 0 }),
    status: { type: 'string', enum: [ALIVE, DEAD, NO_HANDSHAKE] },
    allowed_ips: { type: 'array', items: { type: 'string' } },
    endpoint: nullable({ type: 'string' }),
    rx_bytes: BYTES,
    tx_bytes: BYTES,
    persistent_keepalive_seconds: { type: 'integer', minimum: 0, description: '0 when off' },
    preshared_key: {
      type: 'boolean',
      description:
        'The kernel holds a preshared key for the peer (issue 31); the key itself is never listed',
    },
    speed_limit_bytes_per_second: nullable({
      type: 'integer',
      minimum: SPEED_LIMIT_MIN,
      maximum: SPEED_LIMIT_MAX,
    }),
    // Where the limit holds in the kernel: both devices, one of them only (the other lost
    // behind the daemon's back), or nowhere.
    speed_limit_holds: { enum: ['both', 'download', 'upload', null] },
    data_cap: nullable({
      type: 'object',
      properties: {
        quota_bytes: BYTES,
        used_bytes: BYTES,
        enforced: { type: 'boolean' },
        period: { enum: [...PERIODS, null], description: 'Usage resets every period' },
        period_start: nullable({
          type: 'string',
          description: 'ISO 8601 with the offset given: resets fall at period_start + k periods',
        }),
        next_reset: nullable({ ...TIME_UTC, description: 'When usage next resets (UTC)' }),
        previous_period_used_bytes: nullable({
          ...BYTES,
          description: 'What the last period reset closed with; null before the first',
        }),
        after_cap: { enum: ['block', 'throttle'] },
        throttle_bytes_per_second: nullable({
          type: 'integer',
          minimum: THROTTLE_MIN,
          maximum: THROTTLE_MAX,
        }),
        exhausted_at: nullable({
          ...TIME_UTC,
          description:
            "When the cap ran out in this period (UTC): when the daemon learned it, from the kernel's notice or else the first read that found it used up; null while it has room, or when the exhaustion predates the daemon's run and no state dir kept its time",
        }),
        throttled: {
          type: 'boolean',
          description: 'after_cap is throttle and the cap is used up: the peer is slowed now',
        },
        read_at: {
          ...TIME_UTC,
          description:
            'When the kernel read that used_bytes (and the rest of this object) comes from completed (UTC). The caps are read again on every change the daemon makes, on an nf_tables notification of another program or a quota exhaustion, and otherwise at most as often as the list window or ten times what reading them costs allows (README "Freshness on a capped host")',
        },
      },
      required: [
        'quota_bytes',
        'used_bytes',
        'enforced',
        'period',
        'period_start',
        'next_reset',
        'previous_period_used_bytes',
        'after_cap',
        'throttle_bytes_per_second',
        'exhausted_at',
        'throttled',
        'read_at',
      ],
      additionalProperties: false,
    }),
    suspended: {
      type: 'boolean',
      description: 'No tunnelled packet of the peer passes either way (PATCH .../suspension)',
    },
    name: nullable({
      type: 'string',
      description: "The peer's name (create's name, PATCH .../name); null when it has none",
    }),
    expires_at: nullable({
      type: 'string',
      format: 'date-time',
      description:
        "When the peer expires, ISO 8601 in UTC (create's expiresAt, PATCH .../expiry); null: never",
    }),
    expired: {
      type: 'boolean',
      description:
        "The peer's expiry has passed: the kernel's element of it in the valid set has ended, and it passes no packet either way",
    },
  },
  required: [
    'public_key',
    'ip_address',
    'ipv6_address',
    'last_handshake',
    'minutes_since_handshake',
    'status',
    'allowed_ips',
    'endpoint',
    'rx_bytes',
    'tx_bytes',
    'persistent_keepalive_seconds',
    'preshared_key',
    'speed_limit_bytes_per_second',
    'speed_limit_holds',
    'data_cap',
    'suspended',
    'name',
    'expires_at',
    'expired',
  ],
  additionalProperties: false,
};

/*
 * The list query (issue 29): `status`, and `fields`, a partial response in Google APIs' `fields`
 * convention restricted to what the list needs: a comma-separated list of the peer's field
 * names and dotted paths into `data_cap` (`data_cap.used_bytes`); no spaces, no parentheses.
 * The names come from peerResponse above (the schema of what the body writes), so the schema
 * that validates the query, the OpenAPI document generated from it and the body agree.
 */

/** The peer's field names, in the order the body writes them. */
export const PEER_FIELDS: readonly string[] = Object.keys(
  peerResponse['properties'] as Record<string, unknown>,
);

/** The fields of a peer's `data_cap` object, in the order the body writes them. */
export const CAP_FIELDS: readonly string[] = Object.keys(
  (
    (peerResponse['properties'] as Record<string, JsonSchema>)['data_cap']!['anyOf'] as JsonSchema[]
  )[0]!['properties'] as Record<string, unknown>,
);

/** Every name `fields` takes: the peer's fields and `data_cap.<field>`. */
export const FIELD_NAMES: readonly string[] = [
  ...PEER_FIELDS,
  ...CAP_FIELDS.map((name) => `data_cap.${name}`),
];

/** The longest `fields` value taken: every name once, and as many again (repeats are allowed). */
const FIELDS_MAX_LENGTH = 2 * FIELD_NAMES.join(',').length;

const NAME_ALTERNATIVES = `(?:${FIELD_NAMES.map((name) => name.replace('.', '\\.')).join('|')})`;

export const listQuery: ValidateFunction<ListQuery> = compiledOnUse<ListQuery>({
  type: 'object',
  properties: {
    status: { type: 'string', enum: ['ALIVE', 'DEAD'] },
    name: {
      type: 'string',
      minLength: 1,
      maxLength: NAME_MAX_LENGTH,
      description:
        'Only the peers with exactly this name (issue 31); with status, those of both. `filter` still echoes status only',
    },
    fields: {
      type: 'string',
      maxLength: FIELDS_MAX_LENGTH,
      pattern: `^${NAME_ALTERNATIVES}(?:,${NAME_ALTERNATIVES})*$`,
      description:
        "A partial response (Google APIs' `fields` convention): only these fields of each peer, " +
        'comma-separated, in any order, each once however often named; `data_cap.<field>` ' +
        'selects within `data_cap`, which stays `null` for a peer without a cap. The envelope ' +
        '(`success`, `peers`, `total_count`, `filter`) is whole. An unknown name is 400. ' +
        `Names: ${FIELD_NAMES.join(', ')}`,
    },
  },
  additionalProperties: false,
});

/**
 * A field set of `?fields=`, normalized: each name once, in the body's order, a `data_cap.<x>`
 * subsumed by `data_cap`, and every field of `data_cap` named the same as `data_cap`. `key` is
 * its text, the same for every spelling of one set (the memo key of its bodies).
 */
export interface FieldSet {
  readonly key: string;
  /** The peer's fields written, in the body's order (`data_cap` when whole or in part). */
  readonly fields: readonly string[];
  /** The fields of `data_cap` written; null when `data_cap` is whole or not asked for. */
  readonly capFields: readonly string[] | null;
}

export interface ListRequest {
  filter: FilterStatus | null;
  /** Only peers of exactly this name (issue 31); null: any. */
  name: string | null;
  /** null: the full body (no `fields`, or every field named). */
  fields: FieldSet | null;
}

/** The query of GET /api/peers, checked (400 VALIDATION_FAILED naming a bad field name). */
export function checkListQuery(query: unknown): ListRequest {
  const raw = (query as { fields?: unknown } | null)?.fields;
  if (typeof raw === 'string' && raw.length <= FIELDS_MAX_LENGTH) {
    const unknown = raw.split(',').find((name) => !FIELD_NAMES.includes(name));
    if (unknown !== undefined) {
      const shown = JSON.stringify(unknown);
      throw new ValidationError(
        unknown === ''
          ? 'Invalid query: fields holds an empty name; give field names separated by single commas'
          : `Invalid query: fields holds ${shown}, which is not a field of a peer; the names are ${FIELD_NAMES.join(', ')}`,
        [
          {
            field: '/fields',
            message: unknown === '' ? 'empty field name' : `unknown field ${shown}`,
          },
        ],
      );
    }
  }
  const checked = check(listQuery, query, 'query');
  return {
    filter: checked.status ?? null,
    name: checked.name ?? null,
    fields: checked.fields === undefined ? null : fieldSetOf(checked.fields.split(',')),
  };
}

/** The normalized set of known names (FieldSet); null when it is every field of a peer. */
export function fieldSetOf(names: readonly string[]): FieldSet | null {
  const asked = new Set(names);
  const capFields = CAP_FIELDS.filter((name) => asked.has(`data_cap.${name}`));
  const capWhole = asked.has('data_cap') || capFields.length === CAP_FIELDS.length;
  const fields = PEER_FIELDS.filter(
    (name) => asked.has(name) || (name === 'data_cap' && capFields.length > 0),
  );
  if (fields.length === PEER_FIELDS.length && capWhole) return null;
  const part = capWhole || capFields.length === 0 ? null : capFields;
  const key = fields
    .map((name) =>
      name === 'data_cap' && part !== null ? part.map((c) => `data_cap.${c}`).join(',') : name,
    )
    .join(',');
  return { key, fields, capFields: part };
}

export const listResponse: JsonSchema = {
  type: 'object',
  properties: {
    success: { const: true },
    peers: { type: 'array', items: peerResponse },
    total_count: { type: 'integer', minimum: 0 },
    filter: nullable({ type: 'string', enum: [ALIVE, DEAD] }),
  },
  required: ['success', 'peers', 'total_count', 'filter'],
  additionalProperties: false,
};

export const createdResponse: JsonSchema = {
  type: 'object',
  properties: {
    success: { const: true },
    peer: {
      type: 'object',
      properties: {
        ip: { type: 'string', description: 'IPv4 tunnel address' },
        ipv6: {
          type: 'string',
          description: 'IPv6 tunnel address (/128), only on a dual-stack interface',
        },
        privateKey: { type: 'string', pattern: PUBLIC_KEY_PATTERN },
        publicKey: { type: 'string', pattern: PUBLIC_KEY_PATTERN },
        presharedKey: {
          type: 'string',
          pattern: '^[A-Za-z0-9+/]{43}=$',
          description:
            "The peer's preshared key (base64 of 32 random bytes), only when one was made (presharedKey: true, or --preshared-keys): returned this once, never listed or logged; also the config's PresharedKey",
        },
      },
      required: ['ip', 'privateKey', 'publicKey'],
      additionalProperties: false,
    },
    server: {
      type: 'object',
      properties: {
        publicKey: { type: 'string', pattern: PUBLIC_KEY_PATTERN },
        endpoint: { type: 'string' },
      },
      required: ['publicKey', 'endpoint'],
      additionalProperties: false,
    },
    config: { type: 'string', description: 'wg-quick configuration for the client' },
  },
  required: ['success', 'peer', 'server', 'config'],
  additionalProperties: false,
};

export const messageResponse: JsonSchema = {
  type: 'object',
  properties: { success: { const: true }, message: { type: 'string' } },
  required: ['success', 'message'],
  additionalProperties: false,
};

/** POST .../data-cap/reset: the message and the usage the reset closed. */
export const capResetResponse: JsonSchema = {
  type: 'object',
  properties: {
    success: { const: true },
    message: { type: 'string' },
    usedBytes: {
      type: 'integer',
      minimum: 0,
      description: 'Bytes the closing period let through (at most the cap)',
    },
  },
  required: ['success', 'message', 'usedBytes'],
  additionalProperties: false,
};

/** The error envelope of DESIGN §3 (errors.ts); `codes` narrows `code` to those listed. */
export function errorResponse(codes: readonly string[] | null): JsonSchema {
  const code: JsonSchema =
    codes === null
      ? { type: 'string', pattern: '^[A-Z][A-Z0-9]*(_[A-Z0-9]+)*$' }
      : { type: 'string', enum: [...codes] };
  return {
    type: 'object',
    properties: {
      success: { const: false },
      error: { type: 'string', minLength: 1 },
      code,
      details: {
        type: 'array',
        items: {
          type: 'object',
          properties: { field: { type: 'string' }, message: { type: 'string' } },
          required: ['field', 'message'],
          additionalProperties: false,
        },
      },
    },
    required: ['success', 'error', 'code'],
    additionalProperties: false,
  };
}
