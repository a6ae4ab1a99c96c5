/**
 * Where a daemon's first list after a start goes, from a V8 CPU profile of that start (issue 29:
 * docs/benchmarks.md "The start's first read, profiled and cut"). Takes the `.cpuprofile` files
 * that `BENCH_NODE_FLAGS="--cpu-prof --cpu-prof-dir=/run/vm/out"` left (bench/api.ts's start
 * part, through scripts/vm/run.sh with WG_PEERD_VM_KEEP=1 or --out), and for each prints the
 * span from the first sample inside the start's read (`readParts`) to the last inside the first
 * body's write (`writeListResponse`), and that span's samples put under categories: a sample
 * goes to the first category (in the table's order) one of whose functions is on its stack, else
 * to "everything else". Each sample counts until the next one. Reads files only; no kernel.
 *
 *   node dist/bench/start-profile.js CPU.*.cpuprofile
 */
import { readFileSync } from 'node:fs';

/** The parts of a .cpuprofile this reads (the format of V8's Profiler.Profile). */
interface Profile {
  nodes: Array<{
    id: number;
    callFrame: { functionName: string; url: string };
    children?: number[];
  }>;
  samples: number[];
  timeDeltas: number[];
}

/** The categories, in order: a stack frame `function@file` matching a pattern claims the sample. */
const CATEGORIES: ReadonlyArray<readonly [string, RegExp]> = [
  ['quota objects decode (CapListing.objects)', /(^| )objects@listing\.js/],
  ['caps built (CapListing.caps)', /(^| )caps@listing\.js/],
  ['caps map decode', /(^| )decodeObjrefElements@/],
  ['netlink receive and split', /(^| )onDatagram@socket\.js/],
  ['speed limits (class dumps)', /(^| )(peerClasses@index\.js|readLimits@)/],
  ['drift.notice', /(^| )notice@drift\.js/],
  ['keepCaps (exhaustion, periods, listed caps)', /(^| )keepCaps@service\.js/],
  ['period scheduler wake', /(^| )wake@period-scheduler\.js/],
  ['body build (buildListBody)', /(^| )(buildListBody@list-body\.js|inSlices@view\.js)/],
  ['body write (writeListResponse)', /(^| )writeListResponse@list\.js/],
  ['garbage collector', /^\(garbage collector\)@/],
  ['idle (waiting for the kernel)', /^\(idle\)@/],
];

/** The span and its categories, ms. */
export function firstListSpan(profile: Profile): {
  from: number;
  to: number;
  parts: Map<string, number>;
} {
  const byId = new Map(profile.nodes.map((node) => [node.id, node]));
  const parent = new Map<number, number>();
  for (const node of profile.nodes)
    for (const child of node.children ?? []) parent.set(child, node.id);
  const stacks: string[] = [];
  const times: number[] = [];
  let at = 0;
  for (let i = 0; i < profile.samples.length; i++) {
    at += profile.timeDeltas[i]! / 1000;
    times.push(at);
    const frames: string[] = [];
    for (let id: number | undefined = profile.samples[i]; id !== undefined; id = parent.get(id)) {
      const { functionName, url } = byId.get(id)!.callFrame;
      frames.push(`${functionName}@${url.split('/').pop() ?? ''}`);
    }
    stacks.push(frames.join(' '));
  }
  const from = times[stacks.findIndex((stack) => stack.includes('readParts@service.js'))];
  let last = stacks.length - 1;
  while (last >= 0 && !stacks[last]!.includes('writeListResponse@list.js')) last--;
  if (from === undefined || last < 0) throw new Error('no first list in this profile');
  const to = times[last]!;
  const parts = new Map<string, number>(CATEGORIES.map(([name]) => [name, 0]));
  parts.set('everything else', 0);
  for (let i = 0; i < stacks.length; i++) {
    if (times[i]! < from || times[i]! > to) continue;
    const lasted = (times[i + 1] ?? times[i]!) - times[i]!;
    const name =
      CATEGORIES.find(([, pattern]) => pattern.test(stacks[i]!))?.[0] ?? 'everything else';
    parts.set(name, parts.get(name)! + lasted);
  }
  return { from, to, parts };
}

if (require.main === module) {
  for (const file of process.argv.slice(2)) {
    const { from, to, parts } = firstListSpan(JSON.parse(readFileSync(file, 'utf8')) as Profile);
    console.log(
      `${file}: from the read's start (${from.toFixed(0)} ms) to the first body written (${to.toFixed(0)} ms): ${(to - from).toFixed(0)} ms`,
    );
    for (const [name, ms] of parts) console.log(`${ms.toFixed(0).padStart(7)} ms  ${name}`);
  }
}
