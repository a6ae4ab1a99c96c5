/**
 * The webhook outbox's file (issue 30: "pending deliveries are an outbox in the state dir: a
 * restart, a crash or a reboot delivers every pending event once more"), over the file system
 * double that leaves the crash states ALICE lists (test/support/memory-fs.ts): an entry whose
 * add resolved is on disk, a tombstone takes it out, writes share flushes, a failed write is cut
 * back, and a crash at any instant keeps every acknowledged entry and invents none.
 */
import { expect } from 'chai';
import fc from 'fast-check';
import { crc32 } from 'node:zlib';
import {
  OUTBOX_MODE,
  Outbox,
  OutboxFileError,
  StateDirError,
  StateReadOnlyError,
  StateStore,
  decodeOutbox,
  type OutboxEntry,
} from '../../../src/state';
import { MemoryFs } from '../../support/memory-fs';

const FILE = '/var/lib/wg-peerd/wg0/outbox';

function entry(i: number, target = 't1'): OutboxEntry {
  return {
    target,
    id: `run1.${i}`,
    type: 'peer.created',
    json: JSON.stringify({ type: 'peer.created', n: i }),
    queuedAt: 1_700_000_000_000 + i,
  };
}

async function open(fs: MemoryFs): Promise<Outbox> {
  fs.putDirs('/var/lib/wg-peerd/wg0');
  return (await Outbox.open(fs, FILE)).outbox;
}

const ids = (outbox: Outbox): string[] => outbox.pending().map((e) => e.id);

describe('state/outbox: the webhook outbox file (issue 30)', () => {
  it('an add resolves once the entry is on disk: the least a reboot finds holds it, in the order queued', async () => {
    const fs = new MemoryFs();
    const outbox = await open(fs);
    for (let i = 1; i <= 3; i++) await outbox.add(entry(i));
    const after = await open(fs.crashed());
    expect(after.pending()).to.deep.equal([entry(1), entry(2), entry(3)]);
    expect(fs.files.get(FILE)!.mode).to.equal(OUTBOX_MODE);
  });

  it('a removal is a tombstone: the entry is gone after a crash, and the next open compacts the file to the pending adds', async () => {
    const fs = new MemoryFs();
    const outbox = await open(fs);
    for (let i = 1; i <= 4; i++) await outbox.add(entry(i));
    await outbox.remove('t1', 'run1.2');
    await outbox.remove('t1', 'run1.4');
    expect(ids(outbox)).to.deep.equal(['run1.1', 'run1.3']);
    const image = fs.crashed();
    const after = await open(image);
    expect(ids(after)).to.deep.equal(['run1.1', 'run1.3']);
    const records = decodeOutbox(image.files.get(FILE)!.data).records;
    expect(records.map((r) => `${r.t} ${r.id}`)).to.deep.equal(['add run1.1', 'add run1.3']);
  });

  it('shares disk flushes between concurrent writes (group commit): 50 adds, at most 3 flushes', async () => {
    const fs = new MemoryFs();
    const outbox = await open(fs);
    const before = fs.syncs;
    await Promise.all(Array.from({ length: 50 }, (_, i) => outbox.add(entry(i))));
    expect(fs.syncs - before).to.be.at.most(3);
    expect(outbox.pending()).to.have.length(50);
  });

  it('per target: how many are pending and when the oldest was queued', async () => {
    const outbox = await open(new MemoryFs());
    await outbox.add(entry(5, 'a'));
    await outbox.add(entry(6, 'a'));
    await outbox.add(entry(7, 'b'));
    await outbox.remove('a', 'run1.5');
    expect([...outbox.stats()]).to.deep.equal([
      ['a', { depth: 1, oldestAt: entry(6).queuedAt }],
      ['b', { depth: 1, oldestAt: entry(7).queuedAt }],
    ]);
  });

  it('a failed write rejects its batch and is cut back; the next add goes on a clean line', async () => {
    const fs = new MemoryFs();
    const outbox = await open(fs);
    await outbox.add(entry(1));
    fs.fail('write', 'ENOSPC', { partial: 20 });
    let failure: unknown;
    await outbox.add(entry(2)).catch((error: unknown) => (failure = error));
    expect((failure as NodeJS.ErrnoException).code).to.equal('ENOSPC');
    await outbox.add(entry(3));
    const after = await Outbox.open(fs.crashed(), FILE);
    expect(ids(after.outbox)).to.deep.equal(['run1.1', 'run1.3']);
    expect(after.damaged).to.equal(null);
  });

  it('when the cut-back fails too, the next write first rewrites the file from memory', async () => {
    const fs = new MemoryFs();
    const outbox = await open(fs);
    await outbox.add(entry(1));
    fs.fail('write', 'EIO', { partial: 30 });
    fs.fail('truncate', 'EIO');
    await outbox.add(entry(2)).catch(() => undefined);
    await outbox.add(entry(3));
    const after = await Outbox.open(fs.crashed(), FILE);
    expect(ids(after.outbox)).to.deep.equal(['run1.1', 'run1.3']);
  });

  it('skips and counts damaged lines (a cut write, a page of zeros) and keeps every good line, wherever it lies', () => {
    const fs = new MemoryFs();
    const good = [entry(1), entry(2)].map((e) => {
      const json = JSON.stringify({
        t: 'add',
        g: e.target,
        id: e.id,
        ty: e.type,
        q: e.queuedAt,
        b: e.json,
      });
      return `${crc(json)} ${json}\n`;
    });
    const bytes = Buffer.concat([
      Buffer.from(good[0]!),
      Buffer.from('0badc0de {"t":"add"}\n'),
      Buffer.from(good[1]!),
      Buffer.from(good[0]!.slice(0, 25)),
    ]);
    fs.put(FILE, bytes);
    const decoded = decodeOutbox(fs.files.get(FILE)!.data);
    expect(decoded.records.map((r) => r.id)).to.deep.equal(['run1.1', 'run1.2']);
    expect(decoded.damaged).to.deep.equal({ lines: 2, bytes: 21 + 25 });
  });

  it('refuses a symbolic link or a file group or others may read, and the start says so in one line', async () => {
    const linked = new MemoryFs();
    linked.putSymlink(FILE, '/etc/shadow');
    let failure: unknown;
    await Outbox.open(linked, FILE).catch((error: unknown) => (failure = error));
    expect(failure).to.be.instanceOf(OutboxFileError);
    expect((failure as Error).message).to.contain('symbolic link');
    const exposed = new MemoryFs();
    exposed.put(FILE, '', 0o644);
    const store = await StateStore.open({
      dir: '/var/lib/wg-peerd',
      interfaceName: 'wg0',
      fs: exposed,
    });
    failure = undefined;
    await store.openOutbox().catch((error: unknown) => (failure = error));
    expect(failure).to.be.instanceOf(StateDirError);
    expect((failure as Error).message)
      .to.contain(`chmod go= ${FILE}`)
      .and.not.contain('\n');
  });

  it('on a read-only file system, loads what is there and rejects every write', async () => {
    const fs = new MemoryFs();
    const outbox = await open(fs);
    await outbox.add(entry(1));
    const image = fs.crashed();
    image.readOnly = true;
    const after = await Outbox.open(image, FILE);
    expect(ids(after.outbox)).to.deep.equal(['run1.1']);
    expect(after.outbox.readOnly).to.contain('EROFS');
    let failure: unknown;
    await after.outbox.add(entry(2)).catch((error: unknown) => (failure = error));
    expect(failure).to.be.instanceOf(StateReadOnlyError);
  });

  it('a crash at any instant, into any state, keeps every acknowledged entry not yet removed, and invents none', async function () {
    this.timeout(60_000);
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.oneof(fc.constant('add' as const), fc.constant('remove' as const)), {
          minLength: 1,
          maxLength: 40,
        }),
        fc.integer({ min: 0, max: 80 }),
        fc.infiniteStream(fc.nat()),
        async (steps, crashAt, picks) => {
          const pick = (n: number): number => {
            const value = picks.next().value;
            return value % 3 === 0 ? n - 1 : value % n;
          };
          const fs = new MemoryFs();
          const outbox = await open(fs);
          const acked = new Set<string>();
          const removedAcked = new Set<string>();
          const everAdded = new Set<string>();
          let atCrash: { acked: Set<string>; removed: Set<string> } | null = null;
          fs.crashBefore(crashAt, pick, () => {
            atCrash = { acked: new Set(acked), removed: new Set(removedAcked) };
          });
          const writes: Array<Promise<void>> = [];
          let next = 0;
          for (const step of steps) {
            if (step === 'add' || acked.size === 0) {
              const e = entry(next++);
              everAdded.add(e.id);
              writes.push(outbox.add(e).then(() => void acked.add(e.id)));
            } else {
              const id = [...acked][pick(acked.size)]!;
              writes.push(outbox.remove('t1', id).then(() => void removedAcked.add(id)));
            }
            if (pick(3) === 0) await Promise.all(writes);
          }
          await Promise.all(writes);
          const crash = fs.crash ?? fs.crashed(pick);
          const at = atCrash ?? { acked, removed: removedAcked };
          const loaded = new Set(ids((await Outbox.open(crash, FILE)).outbox));
          for (const id of at.acked) {
            if (!at.removed.has(id)) expect(loaded.has(id), `acknowledged ${id}`).to.equal(true);
          }
          for (const id of loaded) expect(everAdded.has(id), `invented ${id}`).to.equal(true);
          for (const id of at.removed) expect(loaded.has(id), `removed ${id}`).to.equal(false);
        },
      ),
      { numRuns: 150 },
    );
  });
});

function crc(json: string): string {
  return crc32(json).toString(16).padStart(8, '0');
}
