/**
 * `npm run fuzz`: fuzzes every netlink decoder of the decoder table (test/fuzz/decoders.ts) and
 * prints, per decoder, the cases run, typed errors, successes and unexpected errors, then a
 * total line. Exits 1 on any unexpected error (printing the first few with their case and input).
 *
 *   npm run fuzz                                   100,000 cases, random seed
 *   npm run fuzz -- --cases 5000 --seed 42         FUZZ_CASES / FUZZ_SEED work too
 *   npm run fuzz -- --seed 42 --only nft.rule      replays one decoder's cases of a run
 */
import { parseArgs } from 'node:util';
import { type DecoderStats, runFuzz } from '../test/fuzz/run';

function hexBytes(_key: string, value: unknown): unknown {
  return value instanceof Uint8Array ? Buffer.from(value).toString('hex') : value;
}

function row(cells: Array<string | number>): string {
  const [name, ...numbers] = cells;
  return `${String(name).padEnd(32)}${numbers.map((n) => String(n).padStart(11)).join('')}`;
}

async function main(): Promise<number> {
  const { values } = parseArgs({
    options: {
      cases: { type: 'string', default: process.env.FUZZ_CASES ?? '100000' },
      seed: { type: 'string', default: process.env.FUZZ_SEED },
      only: { type: 'string' },
    },
  });
  const cases = Number(values.cases);
  if (!Number.isSafeInteger(cases) || cases < 1) throw new Error(`--cases: ${values.cases}`);
  const seed = values.seed === undefined ? (Math.random() * 0x7fffffff) | 0 : Number(values.seed);
  if (!Number.isSafeInteger(seed)) throw new Error(`--seed: ${values.seed}`);
  const only = values.only ? ` --only ${values.only}` : '';
  console.log(
    `fuzz: ${cases} cases, seed ${seed} (replay: npm run fuzz -- --seed ${seed} --cases ${cases}${only})`,
  );
  console.log(row(['decoder', 'seeds', 'cases', 'typed', 'success', 'unexpected', 'ms']));
  const started = performance.now();
  let last = started;
  const results: DecoderStats[] = await runFuzz({
    seed,
    cases,
    only: values.only,
    progress: (s) => {
      const now = performance.now();
      console.log(
        row([s.name, s.seeds, s.cases, s.typed, s.success, s.unexpected, Math.round(now - last)]),
      );
      last = now;
    },
  });
  const sum = (key: 'cases' | 'typed' | 'success' | 'unexpected'): number =>
    results.reduce((total, s) => total + s[key], 0);
  console.log(
    row([
      'total',
      '',
      sum('cases'),
      sum('typed'),
      sum('success'),
      sum('unexpected'),
      Math.round(performance.now() - started),
    ]),
  );
  for (const s of results) {
    for (const f of s.failures) {
      console.log(`\n${s.name}: ${f.reason}`);
      console.log(`  case  ${JSON.stringify(f.fuzzCase, hexBytes)}`);
      console.log(`  input ${f.input.toString('hex').slice(0, 2000)}`);
    }
  }
  return sum('unexpected') === 0 ? 0 : 1;
}

main().then(
  (code) => {
    process.exitCode = code;
  },
  (error: unknown) => {
    console.error(error);
    process.exitCode = 2;
  },
);
