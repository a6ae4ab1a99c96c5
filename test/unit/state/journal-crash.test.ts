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

/** Limits written concurrently to some peers; a compaction; a create of many peers (a batch of several pages). */
type Step = { kind: 'burst'; peers: number[] } | { kind: 'compact' } | { kind: 'many' };

const step: fc.Arbitrary<Step> = fc.oneof(
  {
    arbitrary: fc
      .uniqueArray(fc.integer({ min: 0, max: PEERS - 1 }), { minLength: 1, maxLength: PEERS })
      .map((peers) => ({ kind: 'burst' as const, peers })),
    weight: 4,
  },
  { arbitrary: fc.constant({ kind: 'compact' as const }), weight: 1 },
  { arbitrary: fc.constant({ kind: 'many' as const }), weight: 2 },
);

const MANY = 60;

describe('state/journal: random faults, then a crash at a random instant (issue 28)', function () {
  this.timeout(60_000);

  it('never refuses the start after, and keeps every acknowledged write', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(step, { minLength: 1, maxLength: 12 }),
        fc.integer({ min: 0, max: 60 }),
        fc.infiniteStream(fc.nat()),
        fc.integer({ min: 3, max: 12 }),
        async (steps, crashAt, picks, oneIn) => {
          // One pick in three takes the last choice (all of an unsynced write kept, a page zeroed,
          // every pending directory operation kept), so that whole batches with holes come often.
          const pick = (n: number): number => {
            const value = picks.next().value;
            return value % 3 === 0 ? n - 1 : value % n;
          };
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
          // Creates of many peers at once: the keys of those acknowledged.
          const created = new Set<string>();
          let next = 1000;
          let crash: {
            acked: number[];
            written: number[];
            created: Set<string>;
          } | null = null;
          fs.crashBefore(crashAt, pick, () => {
            crash = {
              acked: [...acked],
              written: written.map((w) => w.length),
              created: new Set(created),
            };
          });
          for (const s of steps) {
            if (s.kind === 'many') {
              const peers = Array.from({ length: MANY }, () => {
                const i = next++;
                return { publicKey: key(i), allowedIps: [`10.9.${i >> 8}.${i & 255}/32`] };
              });
              const done = store.commitCreates(peers).then(
                () => {
                  for (const p of peers) created.add(p.publicKey);
                },
                () => undefined,
              );
              await done;
              continue;
            }
            if (s.kind === 'compact') {
              await store.replaceState(structuredClone(store.state)).catch(() => undefined);
              continue;
            }
            const inFlight = s.peers.map((peer) => {
              const v = value++;
              written[peer]!.push(v);
              const index = written[peer]!.length - 1;
              return store.recordLimit(key(peer), v).then(
                () => {
                  acked[peer] = Math.max(acked[peer]!, index);
                },
                () => undefined,
              );
            });
            await Promise.all(inFlight);
          }
          const at = crash ?? { acked, written: written.map((w) => w.length), created };
          const after = await open(fs.crash ?? fs.crashed(pick)); // never a StateDirError
          for (let peer = 0; peer < PEERS; peer++) {
            const allowed = written[peer]!.slice(at.acked[peer], at.written[peer]);
            expect(allowed, `peer ${peer}`).to.include(
              after.state.peers.get(key(peer))?.limit ?? null,
            );
          }
          for (const publicKey of at.created) {
            expect(after.state.peers.has(publicKey), publicKey).to.equal(true);
          }
        },
      ),
      { numRuns: 1000, seed: 28 },
    );
  });
});
