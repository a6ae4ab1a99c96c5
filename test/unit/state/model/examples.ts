/**
 * Programs of the crash-model test (./program.ts) that broke the rules on the code before issue
 * 28's fix, each the shrunk counterexample fast-check found (a few lengthened by hand to the
 * issue's own story), named by the defect it shows. The test runs each one on its own, so a fix
 * can be checked against every defect, not only the first one a random run meets.
 */
import type { Program, Step } from './program';

export interface Example {
  /** The defect, as the test's title says it is gone. */
  title: string;
  program: Program;
}

const at = (gap: number, command: Step['command']): Step => ({ gap, command });
/** Crash after everything answered; nothing unsynced survives; no disk fault. */
const calm = { crashAt: 10_000, crash: { unsyncedBytes: 0 }, faults: [] };

export const EXAMPLES: readonly Example[] = [
  {
    title:
      'a reset that finds no cap yet (409) while the cap is being set does not remove the set cap with its undo',
    program: {
      initialPeers: 1,
      steps: [
        at(0, { kind: 'setCap', peer: 0, period: null }),
        at(0, { kind: 'resetCap', peer: 0 }),
      ],
      ...calm,
    },
  },
  {
    title:
      'a cap raised while its usage is reset, both answered, keeps the raised cap (not the one the reset saw saved)',
    program: {
      initialPeers: 1,
      steps: [
        at(0, { kind: 'setCap', peer: 0, period: null }),
        at(15, { kind: 'setCap', peer: 0, period: null }),
        at(0, { kind: 'resetCap', peer: 0 }),
      ],
      ...calm,
    },
  },
  {
    title:
      'a cap set alone right after a cap with a plan keeps the plan (its record is built from the latest change, not from what was flushed)',
    program: {
      initialPeers: 1,
      steps: [
        at(0, { kind: 'setCap', peer: 0, period: 'month' }),
        at(3, { kind: 'setCap', peer: 0, period: null }),
      ],
      ...calm,
    },
  },
  {
    title:
      'an answered reset is not undone by the record of a cap change that ran beside it (usage counted before the reset comes back)',
    program: {
      initialPeers: 1,
      steps: [
        at(0, { kind: 'setCap', peer: 0, period: null }),
        at(15, { kind: 'usage', peer: 0, bytes: 1 }),
        at(2, { kind: 'setCap', peer: 0, period: 'month' }),
        at(0, { kind: 'resetCap', peer: 0 }),
      ],
      ...calm,
    },
  },
  {
    title:
      'speed limits that fail (404) leave no value behind: an undo restores what its own record replaced, not what another failed change wrote',
    program: {
      initialPeers: 1,
      steps: [
        at(0, { kind: 'removeBehindBack', peer: 0 }),
        at(15, { kind: 'setLimit', peer: 0 }),
        at(2, { kind: 'setLimit', peer: 0 }),
        at(0, { kind: 'setLimit', peer: 0 }),
      ],
      ...calm,
    },
  },
  {
    title:
      'a peer removed behind the daemon’s back is not back after a reboot once a list read no longer showed it',
    program: {
      initialPeers: 1,
      steps: [at(0, { kind: 'removeBehindBack', peer: 0 })],
      ...calm,
    },
  },
  {
    title:
      'the address of a peer removed behind the back is not given to a new peer while the journal holds it (two peers on one address after the reboot)',
    program: {
      initialPeers: 1,
      steps: [at(0, { kind: 'removeBehindBack', peer: 0 }), at(0, { kind: 'create' })],
      ...calm,
    },
  },
  {
    title:
      'a write that fails half-way, then a truncate that fails: later answered changes are not lost as a torn tail',
    program: {
      initialPeers: 1,
      steps: [
        at(0, { kind: 'setLimit', peer: 0 }),
        at(15, { kind: 'suspend', peer: 0, suspended: true }),
      ],
      crashAt: 10_000,
      crash: { unsyncedBytes: 0 },
      faults: [
        { at: 0, code: 'EIO', written: 0.5 },
        { at: 1, code: 'EIO', written: 0 },
      ],
    },
  },
  {
    title:
      'a write that fails half-way, then a truncate that fails: the reboot does not find the journal damaged mid-file and refuse to start',
    program: {
      initialPeers: 1,
      steps: [
        at(0, { kind: 'setLimit', peer: 0 }),
        at(15, { kind: 'suspend', peer: 0, suspended: true }),
        at(15, { kind: 'suspend', peer: 0, suspended: false }),
      ],
      crashAt: 10_000,
      crash: { unsyncedBytes: 0 },
      faults: [
        { at: 0, code: 'EIO', written: 0.5 },
        { at: 1, code: 'EIO', written: 0 },
      ],
    },
  },
  {
    title:
      'a change answered 507 whose bytes were written before the error, with a truncate that fails, is not there after the reboot',
    program: {
      initialPeers: 1,
      steps: [
        at(0, { kind: 'suspend', peer: 0, suspended: true }),
        at(15, { kind: 'setLimit', peer: 0 }),
      ],
      crashAt: 10_000,
      crash: { unsyncedBytes: 0 },
      faults: [
        { at: 0, code: 'EIO', written: 1 },
        { at: 1, code: 'EIO', written: 0 },
      ],
    },
  },
  {
    title:
      'a restart in the same boot puts back the cap and the suspension an nft flush took from the kernel (it does not forget them)',
    program: {
      initialPeers: 1,
      steps: [
        at(0, { kind: 'setCap', peer: 0, period: null }),
        at(15, { kind: 'suspend', peer: 0, suspended: true }),
        at(15, { kind: 'flushRuleset' }),
      ],
      crashAt: 10_000,
      crash: { unsyncedBytes: 0, restart: true },
      faults: [],
    },
  },
  {
    title:
      'a change answered 507 whose record was written whole, when the fdatasync and the cut-back both fail, is not applied at a restart after kill -9 (the answer says it may be saved, or the rewrite took it away)',
    program: {
      initialPeers: 1,
      steps: [{ gap: 0, command: { kind: 'suspend', peer: 0, suspended: false } }],
      crashAt: 0,
      crash: { unsyncedBytes: 0, restart: false, alice: null },
      faults: [],
      rounds: [
        {
          steps: [{ gap: 0, command: { kind: 'setCap', peer: 0, period: null } }],
          crashAt: 2,
          crash: { unsyncedBytes: 0, restart: true, alice: null },
          faults: [
            { at: 0, code: 'EIO', written: 1 },
            { at: 1, code: 'EIO', written: 0 },
          ],
        },
      ],
    },
  },
  {
    title:
      'a cap alone set on a peer whose cap nft flushed during the change keeps the plan the journal holds, at a restart too',
    program: {
      initialPeers: 1,
      steps: [
        { gap: 0, command: { kind: 'setCap', peer: 0, period: 'day' } },
        { gap: 15, command: { kind: 'usage', peer: 0, bytes: 1 } },
      ],
      crashAt: 3,
      crash: { unsyncedBytes: 0, restart: true, alice: null },
      faults: [],
      rounds: [
        {
          steps: [
            { gap: 0, command: { kind: 'resetCap', peer: 0 } },
            { gap: 0, command: { kind: 'removeCap', peer: 0 } },
            { gap: 0, command: { kind: 'setCap', peer: 0, period: null } },
            { gap: 0, command: { kind: 'flushRuleset' } },
            { gap: 15, command: { kind: 'usage', peer: 0, bytes: 1 } },
          ],
          crashAt: 9,
          crash: { unsyncedBytes: 0, restart: true, alice: null },
          faults: [
            { at: 0, code: 'EIO', written: 0 },
            { at: 2, code: 'EIO', written: 0 },
          ],
        },
      ],
    },
  },
  {
    title:
      "a delete cut off by kill -9 between its record and the kernel, after an nft flush took the peer's suspension, is finished at the restart (the peer is not adopted back without it)",
    program: {
      initialPeers: 1,
      steps: [{ gap: 0, command: { kind: 'delete', peer: 0 } }],
      crashAt: 0,
      crash: { unsyncedBytes: 0, restart: false, alice: null },
      faults: [],
      rounds: [
        {
          steps: [
            { gap: 0, command: { kind: 'suspend', peer: 0, suspended: true } },
            { gap: 15, command: { kind: 'removeLimit', peer: 0 } },
            { gap: 0, command: { kind: 'flushRuleset' } },
            { gap: 0, command: { kind: 'delete', peer: 0 } },
          ],
          crashAt: 20,
          crash: { unsyncedBytes: 0, restart: true, alice: null },
          faults: [],
        },
      ],
    },
  },
  {
    title:
      'a cap nft flushed is put back with the plan the journal holds by a daemon that has not read it since its restart (a reset, a flush, a reset), so the next restart keeps the plan',
    program: {
      initialPeers: 1,
      steps: [{ gap: 0, command: { kind: 'setCap', peer: 0, period: 'month' } }],
      crashAt: 10000,
      crash: { unsyncedBytes: 0, restart: true, alice: null },
      faults: [],
      rounds: [
        {
          steps: [
            { gap: 0, command: { kind: 'resetCap', peer: 0 } },
            { gap: 15, command: { kind: 'flushRuleset' } },
            { gap: 15, command: { kind: 'resetCap', peer: 0 } },
          ],
          crashAt: 10000,
          crash: { unsyncedBytes: 0, restart: true, alice: null },
          faults: [],
        },
      ],
    },
  },
];
