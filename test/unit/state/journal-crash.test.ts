/**
 * The journal under random faults and crashes (issue 28), on the file system double that leaves
 * the crash states ALICE lists (test/support/memory-fs.ts): concurrent writes and compactions
 * while random calls fail with EIO, ENOSPC or EMFILE, then a crash at a random instant into a
 * random state. The start after it never refuses (only the last batch can be damaged, and that
 * is a torn write), and every peer holds its last acknowledged value or one written after it that
 * was never acknowledged: an acknowledged write is never lost, a refused one never wins over a
 * later acknowledged one.
 */
import { expect } from 'chai';
import fc from 'fast-check';
import { StateStore } from '../../../src/state';
import { MemoryFs } from '../../support/memory-fs';

const DIR = '/var/lib/wg-peerd';
const PEERS = 4;

function key(i: number): string {
  const bytes = Buffer.alloc(32);
  bytes.writeUInt32BE(i, 0);
  return bytes.toString('base64');
}

function open(fs: MemoryFs): Promise<StateStore> {
  return StateStore.open({ dir: DIR, interfaceName: 'wg0', fs });
}

type Step = { kind: 'burst'; peers: number[] } | { kind: 'compact' };

const step: fc.Arbitrary<Step> = fc.oneof(
  {
    arbitrary: fc
      .uniqueArray(fc.integer({ min: 0, max: PEERS - 1 }), { minLength: 1, maxLength: PEERS })
      .map((peers) => ({ kind: 'burst' as const, peers })),
    weight: 4,
  },
  { arbitrary: fc.constant({ kind: 'compact' as const }), weight: 1 },
);

describe('state/journal: random faults, then a crash at a random instant (issue 28)', function () {
  this.timeout(60_000);

  it('never refuses the start after, and keeps every acknowledged write', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(step, { minLength: 1, maxLength: 12 }),
        fc.integer({ min: 0, max: 40 }),
        fc.infiniteStream(fc.nat()),
        fc.integer({ min: 3, max: 12 }),
        async (steps, crashAt, picks, oneIn) => {
          const pick = (n: number): number => picks.next().value % n;
          const fs = new MemoryFs();
          const store = await open(fs);
          for (let i = 0; i < PEERS; i++) {
            await store.commitCreates([{ publicKey: key(i), allowedIps: [`10.8.0.${i + 2}/32`] }]);
          }
          fs.failRandomly(pick, {
            ops: [
              'write',
              'sync',
              'truncate',
              'open',
              'create',
              'rename',
              'link',
              'remove',
              'syncDir',
            ],
            codes: ['EIO', 'ENOSPC', 'EMFILE'],
            oneIn,
          });
          // Per peer: every value written, in order, and how many were acknowledged by when.
          const written: Array<Array<number | null>> = Array.from({ length: PEERS }, () => [null]);
          const acked: number[] = Array.from({ length: PEERS }, () => 0);
          let value = 1;
          let ticks = 0;
          let crash: { fs: MemoryFs; acked: number[]; written: number[] } | null = null;
          const maybeCrash = (): void => {
            if (crash === null && ticks++ === crashAt) {
              crash = {
                fs: fs.crashed(pick),
                acked: [...acked],
                written: written.map((w) => w.length),
              };
            }
          };
          for (const s of steps) {
            if (s.kind === 'compact') {
              await store.replaceState(structuredClone(store.state)).catch(() => undefined);
              maybeCrash();
              continue;
            }
            const inFlight = s.peers.map((peer) => {
              const v = value++;
              written[peer]!.push(v);
              const index = written[peer]!.length - 1;
              return store.recordLimit(key(peer), v).then(
                () => {
                  acked[peer] = Math.max(acked[peer]!, index);
                  maybeCrash();
                },
                () => maybeCrash(),
              );
            });
            for (let i = 0; i < 3; i++) {
              await Promise.resolve();
              maybeCrash();
            }
            await Promise.all(inFlight);
          }
          const at = crash ?? {
            fs: fs.crashed(pick),
            acked: [...acked],
            written: written.map((w) => w.length),
          };
          const after = await open(at.fs); // never a StateDirError
          for (let peer = 0; peer < PEERS; peer++) {
            const allowed = written[peer]!.slice(at.acked[peer], at.written[peer]);
            expect(allowed, `peer ${peer}`).to.include(
              after.state.peers.get(key(peer))?.limit ?? null,
            );
          }
        },
      ),
      { numRuns: 300, seed: 28 },
    );
  });
});
