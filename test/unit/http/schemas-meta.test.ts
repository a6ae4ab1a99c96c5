import Ajv, { type ValidateFunction } from 'ajv';
import { expect } from 'chai';
import { ROUTES } from '../../../src/http/routes';
import { ajv as daemonAjv, keyParams } from '../../../src/http/schemas';

// The daemon's ajv compiles without checking its schemas against draft-07's meta-schema (that
// check cost 4.6 s of a 32 s start in the test VM): these tests make that check, once, here.
const metaChecking = new Ajv({ strict: true, allErrors: true });

function requestSchemas(): Array<[string, object]> {
  const out: Array<[string, object]> = [['path parameter publicKey', keyParams.schema as object]];
  for (const def of ROUTES) {
    const parts: Array<[string, ValidateFunction<unknown> | undefined]> = [
      ['query', def.query],
      ['body', def.body],
    ];
    for (const [part, validate] of parts) {
      if (validate !== undefined) out.push([`${def.id} ${part}`, validate.schema as object]);
    }
  }
  return out;
}

describe('request schemas against the JSON Schema draft-07 meta-schema', () => {
  it('checks the path parameter and every query and body schema of the route table', () => {
    const schemas = requestSchemas();
    // keyParams, at least one query (the list's, the events') and the bodies of the writes.
    expect(schemas.length).to.be.greaterThan(8);
    for (const [label, schema] of schemas) {
      const valid = metaChecking.validateSchema(schema);
      expect(valid, `${label}: ${metaChecking.errorsText(metaChecking.errors)}`).to.equal(true);
    }
  });

  it('catches what only the meta-schema knows (a negative length), which the daemon compiles', () => {
    const malformed = { type: 'string', maxLength: -1 };
    expect(metaChecking.validateSchema(malformed)).to.equal(false);
    expect(metaChecking.errorsText(metaChecking.errors)).to.contain('maxLength');
    expect(() => daemonAjv.compile(malformed)).not.to.throw();
  });

  it('leaves the daemon refusing a keyword of the wrong type or an unknown keyword (ajv checks those itself)', () => {
    expect(() => daemonAjv.compile({ type: 'integer', minimum: 'one' })).to.throw(/minimum/);
    expect(() => daemonAjv.compile({ type: 'object', propertees: {} })).to.throw(/unknown keyword/);
  });
});
