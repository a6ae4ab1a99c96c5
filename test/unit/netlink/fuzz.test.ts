/**
 * A bounded fuzz run over every decoder of the decoder table (test/fuzz/decoders.ts): real
 * messages from the recorded transcripts, mutated, and random bytes. Only the codec's typed
 * error may come out; no other exception, no case above 2 s, no read past the input. The seed is
 * fixed and in the test titles: `npm run fuzz -- --seed <seed> --only <name>` replays a decoder.
 * `npm run fuzz` runs 100,000 cases with a random seed.
 */
import { expect } from 'chai';
import { judge } from '../../fuzz/oracle';
import { type DecoderStats, fuzzDecoder, selectDecoders } from '../../fuzz/run';

const SEED = 20261123;
const TOTAL_CASES = 10_000;

/** Random bytes print as hex, not as an object of indices. */
function hexBytes(_key: string, value: unknown): unknown {
  return value instanceof Uint8Array ? Buffer.from(value).toString('hex') : value;
}

function report(stats: DecoderStats): string {
  return stats.failures
    .map(
      (f) =>
        `${f.reason}\n  case ${JSON.stringify(f.fuzzCase, hexBytes)}\n  input ${f.input.toString('hex').slice(0, 400)}`,
    )
    .join('\n');
}

const entries = selectDecoders();
const perDecoder = Math.ceil(TOTAL_CASES / entries.length);

describe(`fuzzing every netlink decoder (seed ${SEED}, ${perDecoder * entries.length} cases)`, function () {
  this.timeout(60_000);

  it('has real seeds for every decoder, and each decodes them without an unexpected error', async () => {
    for (const entry of entries) {
      expect(entry.seeds.length, entry.name).to.be.greaterThan(0);
      let decodedOne = false;
      for (const seed of entry.seeds) {
        const verdict = await judge(entry, seed);
        expect(
          verdict.kind,
          `${entry.name}: ${verdict.kind === 'unexpected' ? verdict.reason : ''}`,
        ).to.not.equal('unexpected');
        if (verdict.kind === 'success') decodedOne = true;
        // Behind a client, the input must reach the parser it is meant for.
        if (entry.reachedTarget)
          expect(entry.reachedTarget(), `${entry.name} reached its request`).to.equal(true);
      }
      expect(decodedOne, `${entry.name}: some recorded message decodes`).to.equal(true);
    }
  });

  for (const entry of entries) {
    it(`${entry.name}: ${perDecoder} cases, nothing but typed errors`, async () => {
      const stats = await fuzzDecoder(entry, SEED, perDecoder);
      expect(stats.cases).to.equal(perDecoder);
      expect(stats.unexpected, report(stats)).to.equal(0);
    });
  }
});
