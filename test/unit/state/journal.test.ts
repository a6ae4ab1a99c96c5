/**
 * The journal's edges (issue 28): what a power cut may leave of the last batch is a torn write,
 * dropped and said; damage before it refuses the start with the offset and the salvage command;
 * journals of the old format still load; and no append is acknowledged that a restart would not
 * read: not after a compaction that failed half-way, not after a failed cut-back.
 */
import { expect } from 'chai';
import fc from 'fast-check';
import {
  type JournalRecord,
  JournalBrokenError,
  JournalUncertainError,
  StateDirError,
  StateStore,
  decodeJournal,
  encodeBatch,
  encodeRecord,
  journalLines,
} from '../../../src/state';
import { Registry } from 'prom-client';
import { registerStateMetrics } from '../../../src/http/state-metrics';
import { MemoryFs, PAGE_SIZE } from '../../support/memory-fs';

const DIR = '/var/lib/wg-peerd';
const JOURNAL = `${DIR}/wg0/journal`;

function key(i: number): string {
  const bytes = Buffer.alloc(32);
  bytes.writeUInt32BE(i, 0);
  return bytes.toString('base64');
}

function open(fs: MemoryFs): Promise<StateStore> {
  return StateStore.open({ dir: DIR, interfaceName: 'wg0', fs });
}

async function refusal(fs: MemoryFs): Promise<string> {
  try {
    await open(fs);
  } catch (error) {
    expect(error).to.be.instanceOf(StateDirError);
    return (error as Error).message;
  }
  throw new Error('the start was not refused');
}

/** A store holding `peers` peers with limits, each write acknowledged. */
async function acknowledged(peers: number): Promise<{ fs: MemoryFs; store: StateStore }> {
  const fs = new MemoryFs();
  const store = await open(fs);
  for (let i = 0; i < peers; i++) {
    await store.commitCreates([{ publicKey: key(i), allowedIps: [`10.8.0.${i + 2}/32`] }]);
    await store.recordLimit(key(i), 1000 + i);
  }
  return { fs, store };
}

/** Appends a batch the way a flush writes it, but never syncs it (the power goes first). */
function unsyncedBatch(fs: MemoryFs, records: JournalRecord[], seq: number): Buffer {
  const inode = fs.files.get(JOURNAL)!;
  const batch = encodeBatch(records, seq);
  inode.data = Buffer.concat([inode.data, batch]);
  return batch;
}

function lastSeq(fs: MemoryFs): number {
  return decodeJournal(fs.files.get(JOURNAL)!.data).seq!;
}

async function rejection(promise: Promise<unknown>): Promise<Error> {
  try {
    await promise;
  } catch (error) {
    return error as Error;
  }
  throw new Error('it was acknowledged');
}

function expectAcknowledged(store: StateStore, peers: number): void {
  expect(store.state.peers.size).to.equal(peers);
  for (let i = 0; i < peers; i++) {
    expect(store.state.peers.get(key(i))?.limit, `peer ${i}`).to.equal(1000 + i);
  }
}

describe('state/journal: batches, torn tails and damage (issue 28)', () => {
  it('ends every batch and the compacted journal with a commit marker: sequence, length and count', async () => {
    const { fs } = await acknowledged(1);
    const lines = journalLines(fs.files.get(JOURNAL)!.data);
    const markers = lines.filter((l) => l.value?.t === 'commit');
    expect(markers.length).to.equal(3); // the compacted generation, the create, the limit
    expect(lines.at(-1)?.value).to.deep.include({ t: 'commit', n: 1 });
    const seqs = markers.map((l) => (l.value as { seq: number }).seq);
    expect(seqs).to.deep.equal([seqs[0], seqs[0]! + 1, seqs[0]! + 2]);
  });

  it('drops a last batch with a zero-filled hole (XFS after a power cut) as a torn write, with bytes and records', async () => {
    const { fs } = await acknowledged(3);
    // A batch of several pages, written, never synced; its first page comes back as zeros and
    // its marker is there: the defect read this as damage in the middle and refused the start.
    const records: JournalRecord[] = Array.from({ length: 200 }, (_, i) => ({
      t: 'limit',
      k: key(i % 3),
      bps: 9,
    }));
    const batch = unsyncedBatch(fs, records, lastSeq(fs) + 1);
    expect(batch.length).to.be.above(2 * PAGE_SIZE);
    const after = fs.crashed(batch.length); // all of it reached the disk...
    const synced = fs.files.get(JOURNAL)!.synced.length;
    const page = Math.floor(synced / PAGE_SIZE);
    after.files.get(JOURNAL)!.data.fill(0, synced, (page + 1) * PAGE_SIZE); // ...but a hole
    const store = await open(after);
    expectAcknowledged(store, 3);
    expect(store.tornTail?.bytes).to.equal(batch.length);
    expect(store.tornTail?.records).to.be.within(1, 199);
  });

  it('reads any crash of the last unsynced batch (cut anywhere, any pages zeroed) as exactly the acknowledged state', async () => {
    const base = await acknowledged(4);
    const records: JournalRecord[] = Array.from({ length: 120 }, (_, i) => ({
      t: 'limit',
      k: key(i % 4),
      bps: 5,
    }));
    unsyncedBatch(base.fs, records, lastSeq(base.fs) + 1);
    await fc.assert(
      fc.asyncProperty(fc.infiniteStream(fc.nat()), async (picks) => {
        const store = await open(base.fs.crashed((n) => picks.next().value % n));
        expectAcknowledged(store, 4);
      }),
      { numRuns: 200 },
    );
  });

  it('keeps an append made while a replaceState compacts: it waits for the new generation', async () => {
    const fs = new MemoryFs();
    const store = await open(fs);
    await store.commitCreates([{ publicKey: key(1), allowedIps: ['10.8.0.2/32'] }]);
    const next = { ...store.state, peers: new Map(store.state.peers) };
    // The compaction is held just before its rename; the append is issued meanwhile.
    const rename = fs.rename.bind(fs);
    let release: () => void = () => undefined;
    const gate = new Promise<void>((resolve) => (release = resolve));
    fs.rename = async (from, to) => {
      await gate;
      return rename(from, to);
    };
    const turns = async (): Promise<void> => {
      for (let i = 0; i < 20; i++) await new Promise((resolve) => setImmediate(resolve));
    };
    const replaced = store.replaceState(next);
    await turns();
    const appended = store.recordLimit(key(1), 125_000);
    await turns();
    release();
    await Promise.all([replaced, appended]);
    const after = await open(fs.crashed());
    expect(after.state.peers.get(key(1))?.limit).to.equal(125_000);
  });

  it('counts the dropped bytes in wg_peerd_state_torn_tail_bytes_total, once', async () => {
    const { fs } = await acknowledged(1);
    fs.put(JOURNAL, `${fs.text(JOURNAL)}${'\0'.repeat(300)}`);
    const store = await open(fs);
    const registry = new Registry();
    registerStateMetrics(registry, {
      journalBytes: () => store.stats().bytes,
      checkpoints: () => ({
        lastAt: null,
        lastDurationMs: null,
        failures: 0,
        sharedReads: 0,
        ownReads: 0,
      }),
      restoredPeers: () => null,
      tornTailBytes: () => store.tornTail?.bytes ?? 0,
    });
    const scrape = async (): Promise<string | undefined> =>
      (await registry.metrics())
        .split('\n')
        .find((line) => line.startsWith('wg_peerd_state_torn_tail_bytes_total '));
    expect(await scrape()).to.equal('wg_peerd_state_torn_tail_bytes_total 300');
    expect(await scrape()).to.equal('wg_peerd_state_torn_tail_bytes_total 300');
  });

  it('drops garbage after the last batch, and a batch cut before its marker', async () => {
    for (const tail of [
      Buffer.from('\x13\x99garbage\nmore garbage'),
      Buffer.from(encodeRecord({ t: 'limit', k: key(0), bps: 1 })),
    ]) {
      const { fs } = await acknowledged(2);
      const inode = fs.files.get(JOURNAL)!;
      inode.data = inode.synced = Buffer.concat([inode.data, tail]);
      const store = await open(fs);
      expectAcknowledged(store, 2);
      expect(store.tornTail?.bytes).to.equal(tail.length);
    }
  });

  it('refuses damage before the last batch in one line naming the byte offset and the salvage command, never journal.prev', async () => {
    const { fs } = await acknowledged(3);
    const inode = fs.files.get(JOURNAL)!;
    const lines = journalLines(inode.data);
    // A bit flipped in the second peer's create, synced long ago, with batches after it.
    const target = lines.find((l) => l.value?.t === 'peer' && l.value.k === key(1))!;
    const damaged = Buffer.from(inode.data);
    damaged[target.start + 20] ^= 0x01;
    fs.put(JOURNAL, damaged);
    const message = await refusal(fs);
    expect(message).to.contain(`byte offset ${target.start}`).and.contain(JOURNAL);
    expect(message).to.contain(`wg-peerd state salvage --state-dir ${DIR} --interface wg0`);
    expect(message).not.to.contain('.prev').and.not.contain('\n');
    expect(fs.files.get(JOURNAL)!.data.equals(damaged)).to.equal(true);
  });

  it('refuses a zero hole before a whole later batch: only the last batch may be torn', async () => {
    const { fs } = await acknowledged(3);
    const inode = fs.files.get(JOURNAL)!;
    const lines = journalLines(inode.data);
    const target = lines.find((l) => l.value?.t === 'limit' && l.value.k === key(0))!;
    const damaged = Buffer.from(inode.data);
    damaged.fill(0, target.start, target.end - 1);
    fs.put(JOURNAL, damaged);
    expect(await refusal(fs)).to.contain(`byte offset ${target.start}`);
  });

  it('loads a journal of the old format (lines without markers) and rewrites it with markers', async () => {
    const fs = new MemoryFs();
    const old = [
      { t: 'peer', k: key(0), ips: ['10.8.0.2/32'], limit: null, cap: null },
      { t: 'limit', k: key(0), bps: 1000 },
    ] as JournalRecord[];
    // Its last line torn, as the old format allowed.
    fs.put(JOURNAL, old.map(encodeRecord).join('') + encodeRecord(old[1]!).slice(0, 20));
    const store = await open(fs);
    expectAcknowledged(store, 1);
    expect(store.tornTail?.bytes).to.equal(20);
    const decoded = decodeJournal(fs.files.get(JOURNAL)!.data);
    expect(decoded.legacy).to.equal(false);
    expect(decoded.seq).to.be.a('number');
  });
});

describe('state/journal: nothing acknowledged that a restart would not read (issue 28)', () => {
  // `after`: the directory fsync of journal.prev's link comes before the rename; the one that
  // fails here is the one after it.
  for (const [what, op, code, skip] of [
    ['EIO on the directory fsync', 'syncDir', 'EIO', 1],
    ['EMFILE on the reopen', 'open', 'EMFILE', 0],
  ] as const) {
    it(`fails appends after a compaction that failed after its rename (${what}) until a reopen succeeds`, async () => {
      const { fs, store } = await acknowledged(2);
      fs.fail(op, code, { path: 'wg0', after: skip });
      const failed = await rejection(store.replaceState(structuredClone(store.state)));
      expect((failed as NodeJS.ErrnoException).code).to.equal(code);
      expect(store.broken).to.contain(code);
      // The defect acknowledged this one from the orphaned inode (journal.prev): lost at restart.
      fs.fail(op, code, { path: 'wg0', after: skip });
      const refused = await rejection(store.recordLimit(key(0), 7));
      expect(refused).to.be.instanceOf(JournalBrokenError);
      expect(store.state.peers.get(key(0))?.limit).to.equal(1000);
      // The disk answers again: the next append reopens (a compaction from memory) and is kept.
      await store.recordLimit(key(1), 8);
      expect(store.broken).to.equal(null);
      const after = await open(fs.crashed());
      expect(after.state.peers.get(key(0))?.limit).to.equal(1000);
      expect(after.state.peers.get(key(1))?.limit).to.equal(8);
    });
  }

  it('keeps appending to the old generation when a compaction fails before its rename', async () => {
    const { fs, store } = await acknowledged(2);
    fs.fail('create', 'ENOSPC', { path: 'journal.new' });
    await rejection(store.replaceState(structuredClone(store.state)));
    expect(store.broken).to.equal(null);
    await store.recordLimit(key(0), 5);
    const after = await open(fs.crashed());
    expect(after.state.peers.get(key(0))?.limit).to.equal(5);
  });

  it('rewrites the journal from memory at once when the cut-back after a failed write fails, so the refused change is gone even after a kill -9', async () => {
    const { fs, store } = await acknowledged(2);
    fs.fail('write', 'EIO', { partial: 25 });
    fs.fail('truncate', 'EIO');
    const refused = await rejection(store.recordLimit(key(0), 1));
    expect(refused).to.not.be.instanceOf(JournalUncertainError);
    expect(store.broken).to.equal(null);
    // kill -9: the page cache survives, so a record cut back only in memory would be read.
    const after = await open(fs.killed());
    expect(after.tornTail).to.equal(null);
    expect(after.state.peers.get(key(0))?.limit).to.equal(1000);
  });

  it('says a refused change may be saved when the cut-back and the rewrite both fail, marks the journal broken, and acknowledges again only after a compaction from memory', async () => {
    const { fs, store } = await acknowledged(2);
    fs.fail('write', 'EIO', { partial: 25 });
    fs.fail('truncate', 'EIO');
    fs.fail('create', 'EIO', { path: 'journal.new' });
    expect(await rejection(store.recordLimit(key(0), 1))).to.be.instanceOf(JournalUncertainError);
    expect(store.broken).to.contain('EIO');
    // The compaction the next append tries fails too: that append is refused, not lost.
    fs.fail('create', 'EIO', { path: 'journal.new' });
    expect(await rejection(store.recordLimit(key(0), 2))).to.be.instanceOf(JournalBrokenError);
    // The next one rewrites the journal from memory, then is written after it.
    await store.recordLimit(key(1), 3);
    expect(store.broken).to.equal(null);
    const after = await open(fs.crashed());
    expect(after.tornTail).to.equal(null);
    expect(after.state.peers.get(key(0))?.limit).to.equal(1000);
    expect(after.state.peers.get(key(1))?.limit).to.equal(3);
  });
});
