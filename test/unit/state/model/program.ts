/**
 * The cases of the crash-model test, as fast-check arbitraries. A case is a program: a few peers
 * created and answered first, then steps, each a command invoked after a gap of a few turns of
 * the event loop (so several run at once), a crash at a chosen turn, what the crash keeps of the
 * unsynced bytes, and disk faults at chosen journal calls. A command names its peer by an index
 * into the peers created and answered so far (taken modulo their number when it is invoked), so
 * commands on a few peers collide and any shrunk program still means something. Values written
 * are unique per command (its index), so a restored value names the one write it came from.
 */
import fc from 'fast-check';
import type { Period } from '../../../../src/peers';
import type { CrashChoice, DiskFault } from './disk';

export type Command =
  | { kind: 'create' }
  | { kind: 'delete'; peer: number }
  | { kind: 'setLimit'; peer: number }
  | { kind: 'removeLimit'; peer: number }
  /** period null: the cap alone (`{ quotaBytes }`); else the cap with a plan. */
  | { kind: 'setCap'; peer: number; period: Period | null }
  | { kind: 'removeCap'; peer: number }
  | { kind: 'resetCap'; peer: number }
  | { kind: 'suspend'; peer: number; suspended: boolean }
  /** An expiry set (far ahead, unique per command) or cleared (issue 31). */
  | { kind: 'setExpiry'; peer: number; clear: boolean }
  /** The kernel counts bytes on the peer's cap (if it has one), then a usage checkpoint runs. */
  | { kind: 'usage'; peer: number; bytes: number }
  /** `wg set wg0 peer K remove` behind the daemon's back, then a list read. */
  | { kind: 'removeBehindBack'; peer: number }
  /** `systemctl reload nftables` (`flush ruleset`): every cap and suspension gone from the kernel. */
  | { kind: 'flushRuleset' };

export type CommandKind = Command['kind'];

export const ALL_KINDS: readonly CommandKind[] = [
  'create',
  'delete',
  'setLimit',
  'removeLimit',
  'setCap',
  'removeCap',
  'resetCap',
  'suspend',
  'setExpiry',
  'usage',
  'removeBehindBack',
  'flushRuleset',
];

export interface Step {
  /** Turns of the event loop before the command is invoked. */
  gap: number;
  command: Command;
}

/** What runs between two crashes: steps, then the crash. */
export interface RoundProgram {
  steps: Step[];
  /** The turn, counted from the first step's, at which the crash happens (past the end: at the end). */
  crashAt: number;
  crash: CrashChoice;
  faults: DiskFault[];
}

export interface Program extends RoundProgram {
  /** Peers created one after the other, each answered, before the steps. */
  initialPeers: number;
  /** Rounds after the first, each on the daemon the crash before restored. */
  rounds?: RoundProgram[];
}

export interface ProgramShape {
  kinds: readonly CommandKind[];
  /** Disk faults at random journal calls. */
  faults: boolean;
  /** At most this many steps. */
  maxSteps: number;
  /** Up to this many more rounds (crashes) after the first; 0 or absent: one crash. */
  moreRounds?: number;
  /** Some crashes are kill -9 and a restart in the same boot (the kernel keeps its state). */
  restarts?: boolean;
  /** Each command waits for the one before to answer (a gap longer than any change). */
  oneAtATime?: boolean;
}

/** Turns between commands that never overlap: longer than any change takes here. */
export const ONE_AT_A_TIME = 60;

/** Peers a command may name: a few, so that changes collide. */
const PEER = fc.nat({ max: 3 });

function commandOf(kind: CommandKind): fc.Arbitrary<Command> {
  switch (kind) {
    case 'create':
    case 'flushRuleset':
      return fc.constant({ kind });
    case 'setCap':
      return fc.record({
        kind: fc.constant(kind),
        peer: PEER,
        period: fc.constantFrom<Period | null>(null, 'day', 'week', 'month'),
      });
    case 'suspend':
      return fc.record({ kind: fc.constant(kind), peer: PEER, suspended: fc.boolean() });
    case 'setExpiry':
      return fc.record({ kind: fc.constant(kind), peer: PEER, clear: fc.boolean() });
    case 'usage':
      return fc.record({
        kind: fc.constant(kind),
        peer: PEER,
        bytes: fc.integer({ min: 1, max: 1_000_000 }),
      });
    default:
      return fc.record({ kind: fc.constant(kind), peer: PEER });
  }
}

export function programs(shape: ProgramShape): fc.Arbitrary<Program> {
  const command = fc.oneof(...shape.kinds.map(commandOf));
  // Mostly a few turns (changes overlap); sometimes long enough for the changes before to answer.
  const gap =
    shape.oneAtATime === true
      ? fc.constant(ONE_AT_A_TIME)
      : fc.oneof({ weight: 4, arbitrary: fc.nat({ max: 3 }) }, fc.constant(15));
  const step = fc.record({ gap, command });
  const fault: fc.Arbitrary<DiskFault> = fc.oneof(
    {
      weight: 4,
      arbitrary: fc.record({
        at: fc.nat({ max: 24 }),
        code: fc.constantFrom<DiskFault['code']>('EIO', 'ENOSPC', 'EROFS'),
        written: fc.constantFrom(0, 0.5, 1),
      }),
    },
    // A compaction's calls (after a failed cut-back, the journal rewrites itself): EMFILE, EIO.
    fc.record({
      at: fc.nat({ max: 3 }),
      call: fc.constant<'open'>('open'),
      code: fc.constantFrom<DiskFault['code']>('EMFILE', 'EIO'),
      written: fc.constant(0),
    }),
  );
  const round: fc.Arbitrary<RoundProgram> = fc.record({
    steps: fc.array(step, { minLength: 1, maxLength: shape.maxSteps }),
    crashAt: fc.nat({ max: shape.oneAtATime === true ? ONE_AT_A_TIME * shape.maxSteps : 150 }),
    crash: fc.record({
      unsyncedBytes: fc.constantFrom(0, 0, 1, 40, 100_000),
      restart: shape.restarts === true ? fc.boolean() : fc.constant(false),
      // Half the power cuts land in a state ALICE found file systems leave (holes, lost names).
      alice: fc.option(fc.nat(), { nil: null }),
    }),
    faults: shape.faults ? fc.array(fault, { maxLength: 2 }) : fc.constant([]),
  });
  const initialPeers = fc.integer({ min: 1, max: 3 });
  const more = shape.moreRounds ?? 0;
  if (more === 0) return fc.tuple(initialPeers, round).map(([n, r]) => ({ initialPeers: n, ...r }));
  return fc
    .tuple(initialPeers, round, fc.array(round, { maxLength: more }))
    .map(([n, r, rounds]) => ({ initialPeers: n, ...r, rounds }));
}
