/**
 * The file system double (test/support/memory-fs.ts) leaves exactly the crash states ALICE found
 * real POSIX file systems leave (Pillai et al., "All File Systems Are Not Created Equal", OSDI
 * '14), as its contract lists them: unsynced appends cut at any byte, zero-filled pages in
 * unsynced appended data, directory operations lost until their directory's fsync (a prefix of
 * them kept, in order), atomic renames, and synced data that survives. It also fails the calls it
 * is told to, as the errno a kernel would give.
 */
import { expect } from 'chai';
import fc from 'fast-check';
import { MemoryFs, PAGE_SIZE, errno } from '../../support/memory-fs';

const DIR = '/s/wg0';
const FILE = `${DIR}/journal`;

/** A `pick` that answers these values in order, then 0. */
function scripted(...values: number[]): (n: number) => number {
  return (n) => {
    const value = values.shift() ?? 0;
    expect(value, `a pick of ${value} among ${n}`).to.be.below(n);
    return value;
  };
}

/** A file whose first `synced` bytes are on disk and whose next `unsynced` ones are not. */
async function written(synced: Buffer, unsynced: Buffer): Promise<MemoryFs> {
  const fs = new MemoryFs();
  fs.putDirs(DIR);
  const file = await fs.create(FILE, 0o600);
  await file.write(synced);
  await file.sync();
  await fs.syncDir(DIR);
  await file.write(unsynced);
  return fs;
}

async function rejection(promise: Promise<unknown>): Promise<NodeJS.ErrnoException> {
  try {
    await promise;
  } catch (error) {
    return error as NodeJS.ErrnoException;
  }
  throw new Error('it did not fail');
}

describe('test double: MemoryFs crashes as ALICE (OSDI ’14) says file systems do', () => {
  it('keeps synced data and, with crashed(n), up to n unsynced appended bytes (its first meaning)', async () => {
    const fs = await written(Buffer.from('synced|'), Buffer.from('unsynced'));
    expect(fs.crashed().text(FILE)).to.equal('synced|');
    expect(fs.crashed(3).text(FILE)).to.equal('synced|uns');
    expect(fs.crashed(100).text(FILE)).to.equal('synced|unsynced');
  });

  it('1. cuts unsynced appended data at any byte the pick chooses', async () => {
    const fs = await written(Buffer.from('abc'), Buffer.from('defgh'));
    const seen = new Set<string>();
    for (let cut = 0; cut <= 5; cut++) seen.add(fs.crashed(scripted(cut, 0)).text(FILE));
    expect([...seen]).to.deep.equal(['abc', 'abcd', 'abcde', 'abcdef', 'abcdefg', 'abcdefgh']);
  });

  it('2. reads any chosen unsynced 4 KiB page as zeros, never the synced bytes of that page', async () => {
    const synced = Buffer.alloc(100, 's');
    const unsynced = Buffer.alloc(3 * PAGE_SIZE, 'u');
    const fs = await written(synced, unsynced);
    // Keep it all (cut = everything), zero the first page (its unsynced part) and the third.
    const after = fs.crashed(scripted(unsynced.length, 1, 0, 1, 0)).files.get(FILE)!.data;
    expect(after.length).to.equal(100 + 3 * PAGE_SIZE);
    expect(after.subarray(0, 100).toString()).to.equal('s'.repeat(100));
    expect(after.subarray(100, PAGE_SIZE).every((b) => b === 0)).to.equal(true);
    expect(after.subarray(PAGE_SIZE, 2 * PAGE_SIZE).every((b) => b === 0x75)).to.equal(true);
    expect(after.subarray(2 * PAGE_SIZE, 3 * PAGE_SIZE).every((b) => b === 0)).to.equal(true);
    expect(after.subarray(3 * PAGE_SIZE).every((b) => b === 0x75)).to.equal(true);
  });

  it('3. loses a new file, a mkdir and a rename until their directory is fsync’d, keeping a prefix of them in order', async () => {
    const fs = new MemoryFs();
    fs.put(FILE, 'old');
    await fs.mkdir('/s/wg1', 0o700);
    const file = await fs.create(`${FILE}.new`, 0o600);
    await file.write(Buffer.from('new'));
    await file.sync();
    await fs.rename(`${FILE}.new`, FILE);
    // Nothing of it survives without the fsyncs of /s and /s/wg0.
    const least = fs.crashed();
    expect(least.text(FILE)).to.equal('old');
    expect(least.dirs.has('/s/wg1')).to.equal(false);
    expect(least.files.has(`${FILE}.new`)).to.equal(false);
    // /s: its one operation kept; /s/wg0: the create kept, not the rename.
    const some = fs.crashed(scripted(1, 1));
    expect(some.dirs.has('/s/wg1')).to.equal(true);
    expect(some.text(FILE)).to.equal('old');
    expect(some.text(`${FILE}.new`)).to.equal('new');
    await fs.syncDir(DIR);
    await fs.syncDir('/s');
    const synced = fs.crashed();
    expect(synced.text(FILE)).to.equal('new');
    expect(synced.files.has(`${FILE}.new`)).to.equal(false);
    expect(synced.dirs.has('/s/wg1')).to.equal(true);
  });

  it('3. loses the files of a directory whose mkdir was not made durable, even when their own directory was synced', async () => {
    const fs = new MemoryFs();
    await fs.mkdir('/s', 0o700);
    await fs.mkdir(DIR, 0o700);
    const file = await fs.create(FILE, 0o600);
    await file.write(Buffer.from('x'));
    await file.sync();
    await fs.syncDir(DIR);
    expect(fs.crashed().files.has(FILE)).to.equal(false);
    await fs.syncDir('/s');
    await fs.syncDir('/');
    expect(fs.crashed().text(FILE)).to.equal('x');
  });

  it('4. renames atomically: after any crash the name holds the old content or the new, never nothing', async () => {
    await fc.assert(
      fc.asyncProperty(fc.infiniteStream(fc.nat()), async (picks) => {
        const fs = new MemoryFs();
        fs.put(FILE, 'old');
        const file = await fs.create(`${FILE}.new`, 0o600);
        await file.write(Buffer.from('new'));
        await file.sync();
        await fs.rename(`${FILE}.new`, FILE);
        const after = fs.crashed((n) => picks.next().value % n);
        expect(['old', 'new']).to.include(after.text(FILE));
      }),
      { numRuns: 50 },
    );
  });

  it('5. keeps every fsync’d byte of a durable name, whatever the crash picks', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.uint8Array({ minLength: 1, maxLength: 9000 }),
        fc.uint8Array({ maxLength: 9000 }),
        fc.infiniteStream(fc.nat()),
        async (synced, unsynced, picks) => {
          const fs = await written(Buffer.from(synced), Buffer.from(unsynced));
          const after = fs.crashed((n) => picks.next().value % n).files.get(FILE)!.data;
          expect(after.subarray(0, synced.length).equals(Buffer.from(synced))).to.equal(true);
          expect(after.length).to.be.within(synced.length, synced.length + unsynced.length);
        },
      ),
      { numRuns: 50 },
    );
  });

  it('fails the chosen call of an operation with its errno, and a failed sync makes nothing durable', async () => {
    const fs = new MemoryFs();
    fs.putDirs(DIR);
    const file = await fs.create(FILE, 0o600);
    fs.fail('sync', 'EIO', { after: 1 });
    await file.write(Buffer.from('a'));
    await file.sync();
    await file.write(Buffer.from('b'));
    expect((await rejection(file.sync())).code).to.equal('EIO');
    await fs.syncDir(DIR);
    expect(fs.crashed().text(FILE)).to.equal('a');
    fs.fail('write', 'ENOSPC', { partial: 2 });
    expect((await rejection(file.write(Buffer.from('cdef')))).code).to.equal('ENOSPC');
    expect(fs.text(FILE)).to.equal('abcd');
    for (const [op, call] of [
      ['open', () => fs.openAppend(FILE)],
      ['rename', () => fs.rename(FILE, `${FILE}.x`)],
      ['syncDir', () => fs.syncDir(DIR)],
      ['mkdir', () => fs.mkdir('/s/wg9', 0o700)],
      ['truncate', async () => (await fs.openAppend(FILE)).file.truncate(0)],
    ] as const) {
      fs.fail(op, 'EMFILE');
      expect((await rejection(call())).code, op).to.equal('EMFILE');
    }
    fs.readOnly = true;
    expect((await rejection(fs.create(`${DIR}/other`, 0o600))).code).to.equal('EROFS');
    expect(fs.text(FILE)).to.equal('abcd'); // reads still work
  });

  it('fails random calls of chosen operations as a seeded pick says, the same way for the same seed', async () => {
    const run = async (seed: number): Promise<string[]> => {
      let state = seed;
      const fs = new MemoryFs();
      fs.putDirs(DIR);
      const file = await fs.create(FILE, 0o600);
      fs.failRandomly(
        (n) => {
          state = (state * 1103515245 + 12345) % 2 ** 31;
          return state % n;
        },
        { ops: ['write', 'sync'], codes: ['EIO', 'ENOSPC'], oneIn: 3 },
      );
      const outcomes: string[] = [];
      for (let i = 0; i < 30; i++) {
        await file.write(Buffer.from('x')).then(
          () => outcomes.push('ok'),
          (error: NodeJS.ErrnoException) => outcomes.push(error.code!),
        );
      }
      return outcomes;
    };
    const first = await run(7);
    expect(first).to.deep.equal(await run(7));
    expect(first).to.include('ok');
    expect(first.some((o) => o === 'EIO' || o === 'ENOSPC')).to.equal(true);
  });

  it('never follows a planted symbolic link: create refuses it (EEXIST), openAppend too (ELOOP)', async () => {
    const fs = new MemoryFs();
    fs.putSymlink(`${FILE}.new`, '/etc/shadow');
    expect((await rejection(fs.create(`${FILE}.new`, 0o600))).code).to.equal('EEXIST');
    expect((await rejection(fs.openAppend(`${FILE}.new`))).code).to.equal('ELOOP');
    expect((await fs.stat(`${FILE}.new`))?.kind).to.equal('symlink');
    expect(errno('EIO', 'x').code).to.equal('EIO');
  });
});
