/**
 * ajv schemas for every body, query and path parameter the API takes, and the translation of
 * ajv's findings into a ValidationError with `details`.
 */
import Ajv, { type ErrorObject, type ValidateFunction } from 'ajv';
import {
  DATA_CAP_MAX,
  DATA_CAP_MIN,
  PUBLIC_KEY_PATTERN,
  SPEED_LIMIT_MAX,
  SPEED_LIMIT_MIN,
  ValidationError,
  parsePublicKey,
  type FilterStatus,
  type ValidationDetail,
} from '../peers';

const ajv = new Ajv({ allErrors: true, strict: true });

export interface ListQuery {
  status?: FilterStatus;
}
export type EmptyBody = Record<string, never>;
export interface KeyParams {
  publicKey: string;
}
export interface SpeedLimitBody {
  bytesPerSecond: number;
}
export interface DataCapBody {
  quotaBytes: number;
}

export const listQuery: ValidateFunction<ListQuery> = ajv.compile<ListQuery>({
  type: 'object',
  properties: { status: { type: 'string', enum: ['ALIVE', 'DEAD'] } },
  additionalProperties: false,
});

/** Bodies of POST /api/peer and of the DELETEs: nothing, or an empty object. */
export const emptyBody: ValidateFunction<EmptyBody> = ajv.compile<EmptyBody>({
  type: 'object',
  properties: {},
  additionalProperties: false,
});

export const keyParams: ValidateFunction<KeyParams> = ajv.compile<KeyParams>({
  type: 'object',
  properties: { publicKey: { type: 'string', maxLength: 64, pattern: PUBLIC_KEY_PATTERN } },
  required: ['publicKey'],
  additionalProperties: false,
});

export const speedLimitBody: ValidateFunction<SpeedLimitBody> = ajv.compile<SpeedLimitBody>({
  type: 'object',
  properties: {
    bytesPerSecond: { type: 'integer', minimum: SPEED_LIMIT_MIN, maximum: SPEED_LIMIT_MAX },
  },
  required: ['bytesPerSecond'],
  additionalProperties: false,
});

export const dataCapBody: ValidateFunction<DataCapBody> = ajv.compile<DataCapBody>({
  type: 'object',
  properties: { quotaBytes: { type: 'integer', minimum: DATA_CAP_MIN, maximum: DATA_CAP_MAX } },
  required: ['quotaBytes'],
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
