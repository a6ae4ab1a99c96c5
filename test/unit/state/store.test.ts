import { expect } from 'chai';
import {
  COMPACT_MIN_BYTES,
  StateDirError,
  StateStore,
  compactRecords,
  decodeJournal,
  encodeRecord,
  replay,
  type JournalRecord,
} from '../../../src/state';
import { MemoryFs } from '../../support/memory-fs';

const DIR = '/var/lib/wg-peerd';
const JOURNAL = `${DIR}/wg0/journal`;
const KEY_A = 'hS5kTn5b3Ve1pQHnaeNmZ2k4M5eyJ1xCqFe2hDeHjlA=';
const KEY_B = 'xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg=';

async function open(fs: MemoryFs, interfaceName = 'wg0'): Promise<StateStore> {
  return StateStore.open({ dir: DIR, interfaceName, fs });
}

async function refusal(fs: MemoryFs, interfaceName = 'wg0'): Promise<string> {
  try {
    await open(fs, interfaceName);
  } catch (error) {
    expect(error).to.be.instanceOf(StateDirError);
    return (error as Error).message;
  }
  throw new Error('the start was not refused');
}

function journalOf(...records: JournalRecord[]): string {
  return records.map(encodeRecord).join('');
}

describe('state/store: the state directory (issue 16)', () => {
  it('makes the directory 0700 and an empty journal on a first start', async () => {
    const fs = new MemoryFs();
    const store = await open(fs);
    expect(fs.dirs.get(DIR)).to.equal(0o700);
    expect(fs.dirs.get(`${DIR}/wg0`)).to.equal(0o700);
    expect(fs.files.get(JOURNAL)?.mode).to.equal(0o600);
    expect(store.state.peers.size).to.equal(0);
    expect(store.state.boot).to.equal(null);
  });

  it('has a write on disk when it resolves: a crash right after keeps it', async () => {
    const fs = new MemoryFs();
    const store = await open(fs);
    await store.commitCreates([{ publicKey: KEY_A, allowedIps: ['10.8.0.2/32'] }]);
    await store.recordLimit(KEY_A, 250_000);
    await store.recordCap(KEY_A, { quotaBytes: 10_000, usedBytes: 0 });
    const after = await open(fs.crashed());
    expect(after.state.peers.get(KEY_A)).to.deep.equal({
      publicKey: KEY_A,
      allowedIps: ['10.8.0.2/32'],
      limit: 250_000,
      cap: { quotaBytes: 10_000, usedBytes: 0 },
    });
  });

  it('keeps a suspension across a crash and through a compaction, and forgets it on resume', async () => {
    const fs = new MemoryFs();
    const store = await open(fs);
    await store.commitCreates([
      { publicKey: KEY_A, allowedIps: ['10.8.0.2/32'] },
      { publicKey: KEY_B, allowedIps: ['10.8.0.3/32'] },
    ]);
    await store.recordSuspension(KEY_A, true);
    await store.recordSuspension(KEY_B, true);
    await store.recordSuspension(KEY_B, false);
    const after = await open(fs.crashed());
    expect(after.state.peers.get(KEY_A)?.suspended).to.equal(true);
    expect(after.state.peers.get(KEY_B)?.suspended).to.equal(false);
    // A compaction writes whole peer records: the suspension is in them (`s`), resumed or never
    // suspended peers carry nothing.
    const records = compactRecords(after.state);
    expect(records.filter((r) => r.t === 'peer' && r.s === true).length).to.equal(1);
    const again = replay(records);
    expect(again.peers.get(KEY_A)?.suspended).to.equal(true);
    expect(again.peers.get(KEY_B)?.suspended ?? false).to.equal(false);
  });

  it('keeps when a cap ran out across a crash and through a compaction, and forgets it when cleared or with its peer', async () => {
    const fs = new MemoryFs();
    const store = await open(fs);
    await store.commitCreates([
      { publicKey: KEY_A, allowedIps: ['10.8.0.2/32'] },
      { publicKey: KEY_B, allowedIps: ['10.8.0.3/32'] },
    ]);
    await store.recordExhaustion(KEY_A, { quotaBytes: 5_000, at: 1_700_000_000_000 });
    await store.recordExhaustion(KEY_B, { quotaBytes: 7_000, at: 1_700_000_001_000 });
    await store.recordExhaustion(KEY_B, null);
    const after = await open(fs.crashed());
    expect(after.state.exhausted).to.deep.equal(
      new Map([[KEY_A, { quotaBytes: 5_000, at: 1_700_000_000_000 }]]),
    );
    const again = replay(compactRecords(after.state));
    expect(again.exhausted).to.deep.equal(after.state.exhausted);
    await after.recordDelete(KEY_A);
    expect(after.state.exhausted?.size).to.equal(0);
  });

  it('shares disk flushes between concurrent writes (group commit): 50 writes, at most 3 flushes', async () => {
    const fs = new MemoryFs();
    const store = await open(fs);
    const before = fs.syncs;
    const keys = Array.from({ length: 50 }, (_, i) => `${String(i).padStart(42, 'A')}A=`);
    await Promise.all(
      keys.map((k, i) =>
        store.commitCreates([{ publicKey: k, allowedIps: [`10.8.0.${i + 2}/32`] }]),
      ),
    );
    expect(fs.syncs - before).to.be.within(1, 3);
    expect(store.state.peers.size).to.equal(50);
  });

  it('drops a torn last line (a write that never completed) and keeps every record before it', async () => {
    const fs = new MemoryFs();
    const store = await open(fs);
    await store.commitCreates([{ publicKey: KEY_A, allowedIps: ['10.8.0.2/32'] }]);
    // B's record was being written when the power went: half of it reached the disk.
    const torn = encodeRecord({
      t: 'peer',
      k: KEY_B,
      ips: ['10.8.0.3/32'],
      limit: null,
      cap: null,
    });
    fs.put(JOURNAL, fs.text(JOURNAL) + torn.slice(0, 30));
    const after = await open(fs);
    expect(after.tornTail).to.deep.equal({ bytes: 30, records: 0 });
    expect([...after.state.peers.keys()]).to.deep.equal([KEY_A]);
    // The new generation holds no trace of the torn line.
    expect(decodeJournal(Buffer.from(fs.text(JOURNAL))).tornTail).to.equal(null);
  });

  it('refuses a journal of the old format whose damaged line good lines follow, names the offset and the salvage command, and writes nothing', async () => {
    const fs = new MemoryFs();
    const good = journalOf(
      { t: 'peer', k: KEY_A, ips: ['10.8.0.2/32'], limit: null, cap: null },
      { t: 'peer', k: KEY_B, ips: ['10.8.0.3/32'], limit: null, cap: null },
    );
    const damaged = good.replace('10.8.0.2', '10.8.0.9'); // the checksum no longer matches
    fs.put(JOURNAL, damaged);
    const message = await refusal(fs);
    expect(message).to.contain(JOURNAL).and.contain('byte offset 0').and.contain('checksum');
    expect(message).to.contain(`wg-peerd state salvage --state-dir ${DIR} --interface wg0`);
    expect(message).not.to.contain('.prev');
    expect(fs.text(JOURNAL)).to.equal(damaged);
    expect(fs.files.has(`${JOURNAL}.prev`)).to.equal(false);
  });

  it('refuses a state dir, journal or key file that group or others may read, with the chmod that fixes it', async () => {
    for (const [path, kind] of [
      [DIR, 'dir'],
      [`${DIR}/wg0`, 'dir'],
      [JOURNAL, 'file'],
      [`${DIR}/wg0/server.key`, 'file'],
    ] as const) {
      const fs = new MemoryFs();
      await fs.mkdir(DIR, 0o700);
      await fs.mkdir(`${DIR}/wg0`, 0o700);
      if (kind === 'dir') fs.dirs.set(path, 0o750);
      else fs.put(path, path.endsWith('key') ? 'x' : '', 0o644);
      const message = await refusal(fs);
      expect(message).to.contain(path).and.contain(`chmod go= ${path}`);
    }
  });

  it('refuses a journal that describes another interface', async () => {
    const fs = new MemoryFs();
    fs.put(JOURNAL, journalOf({ t: 'boot', bootId: 'b1', ifindex: 7, interfaceName: 'wg1' }));
    const message = await refusal(fs);
    expect(message).to.contain('wg1').and.contain('not wg0');
  });

  it('keeps the generation before each compaction as journal.prev', async () => {
    const fs = new MemoryFs();
    const first = await open(fs);
    await first.commitCreates([{ publicKey: KEY_A, allowedIps: ['10.8.0.2/32'] }]);
    const before = fs.text(JOURNAL);
    await open(fs);
    expect(fs.text(`${JOURNAL}.prev`)).to.equal(before);
    expect(replay(decodeJournal(Buffer.from(fs.text(JOURNAL))).records).peers.has(KEY_A)).to.equal(
      true,
    );
  });

  it('fails a write on a full disk, cuts the half record back, and takes writes again once space is free', async () => {
    const fs = new MemoryFs();
    const store = await open(fs);
    await store.commitCreates([{ publicKey: KEY_A, allowedIps: ['10.8.0.2/32'] }]);
    fs.capacity = fs.text(JOURNAL).length + 20; // room for 20 bytes only
    let failure: unknown;
    await store.recordLimit(KEY_A, 5_000).catch((error: unknown) => (failure = error));
    expect((failure as NodeJS.ErrnoException).code).to.equal('ENOSPC');
    expect(store.state.peers.get(KEY_A)?.limit).to.equal(null);
    expect(decodeJournal(Buffer.from(fs.text(JOURNAL))).tornTail).to.equal(null);
    fs.capacity = Number.POSITIVE_INFINITY;
    await store.recordLimit(KEY_A, 6_000);
    const after = await open(fs.crashed());
    expect(after.state.peers.get(KEY_A)?.limit).to.equal(6_000);
  });

  it('compacts once the journal has grown past its bound, to records that give the same state', async () => {
    const fs = new MemoryFs();
    const store = await open(fs);
    const keys = Array.from({ length: 200 }, (_, i) => `${String(i).padStart(42, 'K')}A=`);
    for (const [i, k] of keys.entries()) {
      await store.commitCreates([
        { publicKey: k, allowedIps: [`10.8.${i >> 8}.${(i & 0xff) + 2}/32`] },
      ]);
      await store.recordCap(k, { quotaBytes: 1e12, usedBytes: 0 });
    }
    let used = 0;
    const checkpoint = (): Promise<number> => {
      used += 1000;
      return store.checkpointUsage(new Map(keys.map((k) => [k, used])));
    };
    while (fs.text(JOURNAL).length < COMPACT_MIN_BYTES / 2) await checkpoint();
    const grown = fs.text(JOURNAL).length;
    while (fs.text(JOURNAL).length >= grown / 2) await checkpoint();
    const after = await open(fs.crashed());
    expect(after.state.peers.size).to.equal(200);
    for (const k of keys) {
      expect(after.state.peers.get(k)?.cap).to.deep.equal({ quotaBytes: 1e12, usedBytes: used });
    }
  });

  it('writes only the counters that changed since the last checkpoint, and nothing when idle', async () => {
    const fs = new MemoryFs();
    const store = await open(fs);
    await store.commitCreates([{ publicKey: KEY_A, allowedIps: ['10.8.0.2/32'] }]);
    await store.commitCreates([{ publicKey: KEY_B, allowedIps: ['10.8.0.3/32'] }]);
    await store.recordCap(KEY_A, { quotaBytes: 1000, usedBytes: 0 });
    await store.recordCap(KEY_B, { quotaBytes: 1000, usedBytes: 0 });
    expect(
      await store.checkpointUsage(
        new Map([
          [KEY_A, 10],
          [KEY_B, 0],
        ]),
      ),
    ).to.equal(1);
    const size = fs.text(JOURNAL).length;
    expect(
      await store.checkpointUsage(
        new Map([
          [KEY_A, 10],
          [KEY_B, 0],
        ]),
      ),
    ).to.equal(0);
    expect(fs.text(JOURNAL).length).to.equal(size);
    // The last line is the batch's commit marker; the record is the one before it.
    const last = fs.text(JOURNAL).trim().split('\n').at(-2)!;
    expect(JSON.parse(last.slice(9))).to.deep.equal({ t: 'usage', u: { [KEY_A]: 10 } });
  });

  it('keeps the server key in a file of its own, mode 0600, never in the journal', async () => {
    const fs = new MemoryFs();
    const store = await open(fs);
    const key = Buffer.alloc(32, 7);
    await store.saveInterface(key, {
      listenPort: 51820,
      addresses: ['10.8.0.1/24'],
      publicKey: KEY_A,
    });
    expect(fs.files.get(`${DIR}/wg0/server.key`)?.mode).to.equal(0o600);
    expect(fs.text(JOURNAL)).not.to.contain(key.toString('base64'));
    const after = await open(fs.crashed());
    expect((await after.readServerKey())?.equals(key)).to.equal(true);
    expect(after.state.iface).to.deep.equal({
      listenPort: 51820,
      addresses: ['10.8.0.1/24'],
      publicKey: KEY_A,
    });
  });
});
