/**
 * The crash-model test of issue 28 (Done when 1): random concurrent API changes on the real
 * PeerService over the fake kernel and an in-memory disk, a crash at a random instant, a reboot
 * (a new empty kernel, a new boot id, StateStore.open on what the crash left, restoreFromState)
 * or, for some cases, kill -9 and a restart in the same boot (the kernel as the crash left it;
 * the issue: "Restart repairs, it does not forget"); some programs crash up to three times,
 * each round on the daemon the last restore left,
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
 * `ModelDisk`): half the power cuts land in one of the states ALICE found file systems leave
 * (test/support/memory-fs.ts, whose own test checks them one by one against that list: unsynced
 * appended data cut at any byte, zero-filled holes in unsynced appended pages, directory
 * operations and renames not yet durable, fdatasync'd data kept), the other half keep a prefix of
 * each file's unsynced bytes; kill -9 keeps all that was written. EIO, ENOSPC and EROFS fail the
 * n-th write, fdatasync or truncate of the journal, EMFILE and EIO the n-th call of a compaction.
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
import { StateWriteError } from '../../../src/peers';
import { EXAMPLES } from './model/examples';
import { History, type Restored } from './model/history';
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
    ...(result.round === undefined
      ? []
      : [`in ${result.round}, from what the restore before showed:`]),
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
    const what = (fc.defaultReportMessage(outcome) ?? 'the property failed').replace(
      /^Hint: .*$/m,
      '',
    );
    expect.fail(`${what.trim()}\n${why}`);
  }
}

/** The API's changes: no usage, nothing behind the daemon's back. */
const changes: readonly CommandKind[] = ALL_KINDS.filter(
  (kind) => kind !== 'removeBehindBack' && kind !== 'usage' && kind !== 'flushRuleset',
);

describe(`state: a crash at any instant of concurrent changes, then a reboot or a restart (issue 28; seed ${SEED})`, function () {
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

  it(`keeps every answered change made one at a time, usage checkpoints included (${runsOf(300)} cases)`, async () => {
    // The control: no change overlaps another, so the records are built from what was flushed
    // and still right. This one passes on the code before the fix too.
    await holds(
      {
        kinds: [...changes, 'usage'],
        faults: false,
        maxSteps: 10,
        oneAtATime: true,
        restarts: true,
      },
      runsOf(300),
      SEED + 4,
    );
  });

  it(`keeps every answered change of concurrent changes to a few peers, and nothing of a failed one (${runsOf(1500)} cases)`, async () => {
    await holds({ kinds: changes, faults: false, maxSteps: 10 }, runsOf(1500), SEED);
  });

  it(`never brings back a peer removed behind the daemon's back once a list read saw it gone, and never gives its address to another (${runsOf(600)} cases)`, async () => {
    await holds(
      { kinds: ['create', 'removeBehindBack', 'setLimit', 'delete'], faults: false, maxSteps: 8 },
      runsOf(600),
      SEED + 1,
    );
  });

  it(`answers 507 for a change whose record a failing disk (EIO, ENOSPC, EROFS) did not write, and keeps it absent (${runsOf(1000)} cases)`, async () => {
    await holds({ kinds: changes, faults: true, maxSteps: 8 }, runsOf(1000), SEED + 2);
  });

  it(`puts back, at a restart in the same boot after kill -9, the caps and suspensions the kernel lost behind the daemon's back (nft flush ruleset) (${runsOf(600)} cases)`, async () => {
    await holds(
      { kinds: [...changes, 'usage', 'flushRuleset'], faults: false, maxSteps: 8, restarts: true },
      runsOf(600),
      SEED + 5,
    );
  });

  it(`keeps them across a second crash, made on the daemon the first restore left (${runsOf(600)} cases)`, async () => {
    await holds(
      { kinds: [...changes, 'usage'], faults: false, maxSteps: 8, restarts: true, moreRounds: 1 },
      runsOf(600),
      SEED + 6,
    );
  });

  it(`holds all of it at once: changes, usage checkpoints, removals behind the back, nft flushes, disk faults, reboots and restarts, up to three crashes (${runsOf(2000)} cases)`, async () => {
    await holds(
      { kinds: ALL_KINDS, faults: true, maxSteps: 12, restarts: true, moreRounds: 2 },
      runsOf(2000),
      SEED + 3,
    );
  });
});

describe('state: the crash-model test’s checker, on literal histories (Knossos’s rule per field)', () => {
  const KEY = 'k';
  /** A call whose answer the test gives: settle(value) or settle(error, false). */
  function deferred(): {
    call: () => Promise<unknown>;
    settle: (value: unknown, ok?: boolean) => Promise<void>;
  } {
    let resolve: (value: unknown) => void = () => undefined;
    let reject: (error: unknown) => void = () => undefined;
    const promise = new Promise<unknown>((yes, no) => {
      resolve = yes;
      reject = no;
    });
    return {
      call: () => promise,
      settle: async (value, ok = true) => {
        if (ok) resolve(value);
        else reject(value);
        await new Promise((done) => setImmediate(done));
      },
    };
  }

  async function created(history: History): Promise<void> {
    const create = deferred();
    history.invoke('create', 'create', null, { exists: true, limit: null }, create.call);
    await create.settle({ publicKey: KEY, ip: '10.8.0.2' });
  }

  function restoredWithLimit(limit: number | null): Restored {
    const peer = {
      allowedIps: ['10.8.0.2/32'],
      limit,
      quota: null,
      plan: null,
      usedBytes: null,
      suspended: false,
      expires: null,
    };
    return { peers: new Map([[KEY, peer]]), journal: new Map([[KEY, peer.allowedIps]]) };
  }

  it('refuses a value overwritten by a change invoked after it answered, and takes the later one', async () => {
    const history = new History();
    await created(history);
    const first = deferred();
    history.invoke('setLimit', 'setSpeedLimit 1000', KEY, { limit: 1000 }, first.call);
    await first.settle(null);
    const second = deferred();
    history.invoke('setLimit', 'setSpeedLimit 2000', KEY, { limit: 2000 }, second.call);
    await second.settle(null);
    history.crash();
    expect(history.check(restoredWithLimit(2000))).to.deep.equal([]);
    expect(history.check(restoredWithLimit(1000))).to.have.length(1);
    expect(history.check(restoredWithLimit(null))).to.have.length(1);
  });

  it('takes either value of two changes that overlapped, and of a change unanswered at the crash', async () => {
    const history = new History();
    await created(history);
    const first = deferred();
    const second = deferred();
    history.invoke('setLimit', 'setSpeedLimit 1000', KEY, { limit: 1000 }, first.call);
    history.invoke('setLimit', 'setSpeedLimit 2000', KEY, { limit: 2000 }, second.call);
    await second.settle(null);
    await first.settle(null);
    const third = deferred();
    history.invoke('setLimit', 'setSpeedLimit 3000', KEY, { limit: 3000 }, third.call);
    history.crash();
    await third.settle(null);
    for (const limit of [1000, 2000, 3000]) {
      expect(history.check(restoredWithLimit(limit)), String(limit)).to.deep.equal([]);
    }
    expect(history.check(restoredWithLimit(null))).to.have.length(1);
  });

  it('refuses the value of a change answered with an error', async () => {
    const history = new History();
    await created(history);
    const failed = deferred();
    history.invoke('setLimit', 'setSpeedLimit 1000', KEY, { limit: 1000 }, failed.call);
    await failed.settle(new StateWriteError(new Error('EIO'), 'nothing was changed'), false);
    history.crash();
    expect(history.check(restoredWithLimit(null))).to.deep.equal([]);
    expect(history.check(restoredWithLimit(1000))).to.have.length(1);
  });
});
