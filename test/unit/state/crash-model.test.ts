/**
 * The crash-model test of issue 28 (Done when 1): random concurrent API changes on the real
 * PeerService over the fake kernel and an in-memory disk, a crash at a random instant, a reboot
 * (a new empty kernel, a new boot id, StateStore.open on what the crash left, restoreFromState),
 * and then the rules of test/unit/state/model/history.ts: every change answered 2xx is present,
 * no deleted peer is back (a peer removed behind the daemon's back included, once a list read
 * after the removal answered: the issue has such a deletion recorded as a DELETE would), no two
 * peers share an address, an unanswered change is whole or absent, and a change whose record
 * could not be written answered 507 and is absent.
 *
 * Anchors: Jepsen/Knossos for checking a concurrent history against a sequential model (here
 * per peer and per field, the "not certainly overwritten" rule); ALICE (Pillai et al., "All File
 * Systems Are Not Created Equal", OSDI '14) for the states a crash may leave. The crash states
 * and the disk faults are in ONE adapter, test/unit/state/model/disk.ts (`crashImage`,
 * `ModelDisk`): today a prefix of each file's unsynced bytes survives, and EIO/ENOSPC fail the
 * n-th write, fdatasync or truncate of the journal. The ALICE states (unsynced data cut at any
 * byte, zero-filled holes in unsynced appended pages, renames not yet durable) and the double's
 * own fault injection plug in there.
 *
 * Seeded and deterministic: the seed is in the titles; WG_PEERD_MODEL_SEED and
 * WG_PEERD_MODEL_RUNS override the seed and the number of cases of every property, and
 * WG_PEERD_MODEL_CASE='<program JSON>' replays one program (a counterexample as printed). A
 * failure prints fast-check's shrunk program and the history of its run (each call, when it was
 * invoked and answered, the crash, what the reboot found) with the rules it broke. The defects
 * found on the code before the fix each have a test of their own (./model/examples.ts).
 */
import { expect } from 'chai';
import fc from 'fast-check';
import { memoizeX25519 } from './model/daemon';
import { EXAMPLES } from './model/examples';
import { type CaseResult, runCase } from './model/run';
import {
  ALL_KINDS,
  type CommandKind,
  type Program,
  type ProgramShape,
  programs,
} from './model/program';

const SEED = Number(process.env['WG_PEERD_MODEL_SEED'] ?? 20261128);
const RUNS = process.env['WG_PEERD_MODEL_RUNS'];

function runsOf(defaultRuns: number): number {
  return RUNS === undefined ? defaultRuns : Number(RUNS);
}

/** The rules a run broke, with its history; empty when it broke none. */
function report(result: CaseResult): string {
  if (result.violations.length === 0) return '';
  return [
    ...result.violations,
    ...(result.faults.length > 0 ? [`disk faults: ${result.faults.join('; ')}`] : []),
    'history (@: instants of one counter over the case):',
    result.history.trace(result.restored),
  ].join('\n');
}

/** Runs one program and fails with its history when it breaks a rule. */
async function keeps(program: Program): Promise<void> {
  const broken = report(await runCase(program));
  if (broken !== '') expect.fail(`${JSON.stringify(program)}\n${broken}`);
}

/** Runs `runs` programs of this shape; a failing one is shrunk and thrown with its history. */
async function holds(shape: ProgramShape, runs: number, seed: number): Promise<void> {
  const property = fc.asyncProperty(programs(shape), async (program) => {
    const broken = report(await runCase(program));
    if (broken !== '') throw new Error(broken);
  });
  const outcome = await fc.check(property, { seed, numRuns: runs, endOnFailure: false });
  if (outcome.failed) {
    const why = outcome.errorInstance instanceof Error ? outcome.errorInstance.message : '';
    expect.fail(`${fc.defaultReportMessage(outcome) ?? 'the property failed'}\n${why}`);
  }
}

const changes: readonly CommandKind[] = ALL_KINDS.filter(
  (kind) => kind !== 'removeBehindBack' && kind !== 'usage',
);

describe(`state: a crash at any instant of concurrent changes, then a reboot (issue 28; seed ${SEED})`, function () {
  this.timeout(120_000);
  let forget: () => void = () => undefined;
  before(() => {
    forget = memoizeX25519();
  });
  after(() => forget());

  const replay = process.env['WG_PEERD_MODEL_CASE'];
  if (replay !== undefined) {
    it('keeps the rules on the program of WG_PEERD_MODEL_CASE', async () => {
      await keeps(JSON.parse(replay) as Program);
    });
  }

  describe('the defects found on the code before the fix, one program each', () => {
    for (const example of EXAMPLES) {
      it(example.title, async () => {
        await keeps(example.program);
      });
    }
  });

  it(`keeps every answered change made one at a time, usage checkpoints included (${runsOf(500)} cases)`, async () => {
    // The control: no change overlaps another, so the records are built from what was flushed
    // and still right. This one passes on the code before the fix too.
    await holds(
      { kinds: [...changes, 'usage'], faults: false, maxSteps: 10, oneAtATime: true },
      runsOf(500),
      SEED + 4,
    );
  });

  it(`keeps every answered change of concurrent changes to a few peers, and nothing of a failed one (${runsOf(1500)} cases)`, async () => {
    await holds({ kinds: changes, faults: false, maxSteps: 10 }, runsOf(1500), SEED);
  });

  it(`never brings back a peer removed behind the daemon's back once a list read saw it gone, and never gives its address to another (${runsOf(800)} cases)`, async () => {
    await holds(
      { kinds: ['create', 'removeBehindBack', 'setLimit', 'delete'], faults: false, maxSteps: 8 },
      runsOf(800),
      SEED + 1,
    );
  });

  it(`answers 507 for a change whose record a failing disk (EIO, ENOSPC) did not write, and keeps it absent (${runsOf(1000)} cases)`, async () => {
    await holds({ kinds: changes, faults: true, maxSteps: 8 }, runsOf(1000), SEED + 2);
  });

  it(`holds all of it at once: changes, usage checkpoints, removals behind the back, disk faults (${runsOf(2500)} cases)`, async () => {
    await holds({ kinds: ALL_KINDS, faults: true, maxSteps: 12 }, runsOf(2500), SEED + 3);
  });
});
