/**
 * The API's validators compiled on first use (issue 29, the first list after a start): loading
 * the schemas compiles nothing; each validator, once called, gives exactly what ajv's function
 * compiled at once from the same schema with the daemon's options gives (verdict and errors),
 * every schema still compiles in strict mode (what a start used to check), and each keeps the
 * schema it was made from (the OpenAPI document and the meta-schema test read it).
 */
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import Ajv, { type ValidateFunction } from 'ajv';
import { expect } from 'chai';
import { eventsQuery } from '../../../src/http/events';
import {
  createBody,
  dataCapBody,
  emptyBody,
  expiryBody,
  keyParams,
  listQuery,
  nameBody,
  speedLimitBody,
  suspensionBody,
} from '../../../src/http/schemas';

const VALIDATORS: Record<string, ValidateFunction<unknown>> = {
  createBody,
  dataCapBody,
  emptyBody,
  expiryBody,
  keyParams,
  listQuery,
  nameBody,
  speedLimitBody,
  suspensionBody,
  eventsQuery,
};

const KEY = 'xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg=';

/** Values across the schemas' fields, valid for some and not for others. */
const PROBES: unknown[] = [
  {},
  null,
  [],
  'x',
  0,
  { unknown: 1 },
  { publicKey: KEY },
  { publicKey: 'not a key' },
  { bytesPerSecond: 125_000 },
  { bytesPerSecond: -1 },
  { bytesPerSecond: 'fast' },
  { quotaBytes: 1_000_000_000, period: 'month', periodStart: '2026-01-01T00:00:00Z' },
  { quotaBytes: 'many' },
  { quotaBytes: 1_000_000_000, afterCap: 'throttle', throttleBytesPerSecond: 125_000 },
  { name: 'office-router' },
  { name: '' },
  { name: 'x'.repeat(1000) },
  { expiresAt: '2030-01-01T00:00:00Z' },
  { expiresAt: 'tomorrow' },
  { expiresAt: null },
  { suspended: true },
  { status: 'ALIVE' },
  { status: 'asleep' },
  { fields: 'public_key,status,data_cap.used_bytes' },
  { fields: 'public_key,nope' },
  { types: 'peer.created,peer.deleted' },
  { types: 'x'.repeat(2000) },
  { allowedIps: ['10.0.0.2/32'], name: 'a' },
  { allowedIps: 'everything' },
  { persistentKeepalive: 25, mtu: 1420, dns: ['1.1.1.1'] },
];

describe('http: request validators compiled on first use (issue 29, the start)', () => {
  it('compiles no schema when the schemas and the daemon main module load', () => {
    const distSrc = path.resolve(__dirname, '../../../src');
    const result = spawnSync(
      process.execPath,
      [
        '-e',
        `const Ajv = require('ajv').default;
         let compiles = 0;
         const compile = Ajv.prototype.compile;
         Ajv.prototype.compile = function (...args) { compiles++; return compile.apply(this, args); };
         require(${JSON.stringify(distSrc)} + '/main.js');
         require(${JSON.stringify(distSrc)} + '/http/schemas.js');
         require(${JSON.stringify(distSrc)} + '/http/events.js');
         const before = compiles;
         require(${JSON.stringify(distSrc)} + '/http/schemas.js').listQuery({});
         console.log(JSON.stringify({ before, after: compiles }));`,
      ],
      { encoding: 'utf8', timeout: 20_000, env: { PATH: process.env.PATH ?? '' } },
    );
    expect(result.status, result.stderr).to.equal(0);
    expect(JSON.parse(result.stdout)).to.deep.equal({ before: 0, after: 1 });
  });

  it('gives the verdict and errors of the validator ajv compiles at once from the same schema, for every schema', () => {
    let valid = 0;
    let invalid = 0;
    for (const [name, validate] of Object.entries(VALIDATORS)) {
      const eager = new Ajv({ allErrors: true, strict: true, validateSchema: false }).compile(
        validate.schema as object,
      );
      for (const probe of PROBES) {
        const verdict = validate(probe);
        expect(verdict, `${name} on ${JSON.stringify(probe)}`).to.equal(eager(probe));
        expect(validate.errors, `${name} on ${JSON.stringify(probe)}`).to.deep.equal(eager.errors);
        if (verdict) valid++;
        else invalid++;
      }
    }
    // The probes reach both sides of the schemas, not only their refusals.
    expect(valid).to.be.greaterThan(10);
    expect(invalid).to.be.greaterThan(10);
  });

  it('compiles every schema in strict mode without an error, as a start used to', () => {
    for (const [name, validate] of Object.entries(VALIDATORS)) {
      expect(() => validate({}), name).not.to.throw();
    }
  });

  it('keeps on `schema` the JSON Schema each validator was made from', () => {
    for (const [name, validate] of Object.entries(VALIDATORS)) {
      expect(validate.schema, name).to.be.an('object').that.has.property('type', 'object');
    }
  });
});
