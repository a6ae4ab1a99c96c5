/**
 * The benchmarks' shared arithmetic: one median and one way to time a piece of work, so that
 * every bench's "median of N" means the same thing; and the node flags of `npm start`, so that
 * a bench that runs the daemon's code in a process of its own runs it as it is deployed; and
 * the modules of a build chosen at run time (a base checkout beside this one); and one load run of
 * autocannon against servers in this process.
 */
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';

/** The middle value of `values` (the mean of the two middle ones for an even count); NaN for none. */
export function median(values: readonly number[]): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[middle]! : (sorted[middle - 1]! + sorted[middle]!) / 2;
}

/** Milliseconds from calling `work` to its settling (performance.now()). */
export async function time(work: () => unknown): Promise<number> {
  const start = performance.now();
  await work();
  return performance.now() - start;
}

/** The median of `runs` timings of `work`, one run after the other. */
export async function timed(runs: number, work: () => unknown): Promise<number> {
  const times: number[] = [];
  for (let i = 0; i < runs; i++) times.push(await time(work));
  return median(times);
}

/**
 * The node flags of `npm start` (package.json scripts.start, held equal to main.ts's shebang and
 * the unit file's by a unit test), read from the checkout whose `dist` holds `distDir`.
 */
export function startNodeFlags(distDir: string): string[] {
  const pkg = JSON.parse(readFileSync(path.join(distDir, '..', 'package.json'), 'utf8')) as {
    scripts: Record<string, string>;
  };
  const words = (pkg.scripts['start'] ?? '').split(/\s+/);
  const script = words.indexOf('dist/src/main.js');
  if (words[0] !== 'node' || script < 0) {
    throw new Error('package.json scripts.start is not "node [flags] dist/src/main.js"');
  }
  return words.slice(1, script);
}

/** The modules of one build that the memory benches use, loaded from its dist directory. */
export interface Build {
  http: typeof import('../src/http');
  peers: typeof import('../src/peers');
  log: typeof import('../src/log');
  dump: typeof import('../src/kernel/wireguard/dump');
  generated: typeof import('../test/support/generated-dump');
}

export function loadBuild(dist: string): Build {
  /* eslint-disable @typescript-eslint/no-require-imports -- a build chosen at run time */
  return {
    http: require(`${dist}/src/http`) as Build['http'],
    peers: require(`${dist}/src/peers`) as Build['peers'],
    log: require(`${dist}/src/log`) as Build['log'],
    dump: require(`${dist}/src/kernel/wireguard/dump`) as Build['dump'],
    generated: require(`${dist}/test/support/generated-dump`) as Build['generated'],
  };
  /* eslint-enable @typescript-eslint/no-require-imports */
}

/** One load run against a server of this process (autocannon's figures, this process's CPU). */
export interface LoadRun {
  /** Requests per second. */
  rate: number;
  /** This process's CPU time (user + system) per request, in microseconds. */
  cpuUs: number;
}

/**
 * autocannon in a process of its own (so the client does not share the servers' thread), 8
 * connections for `seconds` against `url`, `extra` arguments (headers) before it. Rejects when
 * an answer was not 2xx.
 */
export function autocannonLoad(
  url: string,
  seconds: number,
  extra: readonly string[] = [],
): Promise<LoadRun> {
  return new Promise((resolve, reject) => {
    const cpu = process.cpuUsage();
    const child = spawn(
      process.execPath,
      [
        require.resolve('autocannon/autocannon.js'),
        '-j',
        '-c',
        '8',
        '-d',
        String(seconds),
        ...extra,
        url,
      ],
      { stdio: ['ignore', 'pipe', 'ignore'] },
    );
    let out = '';
    child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    child.on('error', reject);
    child.on('exit', () => {
      const used = process.cpuUsage(cpu);
      const result = JSON.parse(out) as {
        requests: { total: number };
        duration: number;
        non2xx: number;
      };
      if (result.non2xx !== 0) reject(new Error(`${result.non2xx} answers were not 2xx`));
      resolve({
        rate: result.requests.total / result.duration,
        cpuUs: (used.user + used.system) / result.requests.total,
      });
    });
  });
}
