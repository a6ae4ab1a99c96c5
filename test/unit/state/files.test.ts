/**
 * The state directory's files (issue 28): owned by the daemon's user, temporary files never
 * opened through a planted symbolic link, every new directory synced into its parent, and a
 * read-only file system (EROFS after an ext4 error) restoring read-only instead of stopping.
 */
import { expect } from 'chai';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import {
  StateDirError,
  StateReadOnlyError,
  StateStore,
  decodeJournal,
  nodeStateFs,
  replay,
} from '../../../src/state';
import { MemoryFs } from '../../support/memory-fs';

const DIR = '/var/lib/wg-peerd';
const JOURNAL = `${DIR}/wg0/journal`;
const KEY_A = 'hS5kTn5b3Ve1pQHnaeNmZ2k4M5eyJ1xCqFe2hDeHjlA=';

function open(fs: MemoryFs): Promise<StateStore> {
  return StateStore.open({ dir: DIR, interfaceName: 'wg0', fs });
}

async function refusal(promise: Promise<unknown>): Promise<string> {
  try {
    await promise;
  } catch (error) {
    expect(error).to.be.instanceOf(StateDirError);
    return (error as Error).message;
  }
  throw new Error('the start was not refused');
}

async function rejection(promise: Promise<unknown>): Promise<Error> {
  try {
    await promise;
  } catch (error) {
    return error as Error;
  }
  throw new Error('it was acknowledged');
}

describe('state/files: ownership, temporary files, new directories (issue 28)', () => {
  for (const [what, set] of [
    ['the state directory', (fs: MemoryFs) => fs.owners.set(DIR, 0)],
    ['the interface directory', (fs: MemoryFs) => fs.owners.set(`${DIR}/wg0`, 0)],
    ['the journal', (fs: MemoryFs) => (fs.files.get(JOURNAL)!.uid = 0)],
    ['a file beside the journal', (fs: MemoryFs) => fs.put(`${DIR}/wg0/notes`, 'x', 0o600, 0)],
  ] as const) {
    it(`refuses ${what} owned by another user, in one line with the chown, and writes nothing`, async () => {
      const fs = new MemoryFs();
      fs.put(JOURNAL, '');
      set(fs);
      const message = await refusal(open(fs));
      expect(message).to.contain('owned by uid 0').and.contain('uid 1000');
      expect(message).to.contain('chown 1000').and.not.contain('\n');
      expect(fs.files.has(`${JOURNAL}.prev`)).to.equal(false);
    });
  }

  it('refuses a symbolic link planted at journal.new and never writes through it (real file system)', async () => {
    const root = mkdtempSync(path.join(tmpdir(), 'wg-peerd-symlink-'));
    try {
      const dir = path.join(root, 'state');
      mkdirSync(path.join(dir, 'wg0'), { recursive: true, mode: 0o700 });
      const victim = path.join(root, 'victim');
      writeFileSync(victim, 'not yours\n');
      symlinkSync(victim, path.join(dir, 'wg0', 'journal.new'));
      const message = await refusal(StateStore.open({ dir, interfaceName: 'wg0' }));
      expect(message).to.contain('journal.new').and.contain('symbolic link');
      expect(readFileSync(victim, 'utf8')).to.equal('not yours\n');
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });

  it('removes a stale journal.new a crash left (a regular file) and starts', async () => {
    const fs = new MemoryFs();
    fs.put(`${JOURNAL}.new`, 'half a generation');
    const store = await open(fs);
    await store.commitCreates([{ publicKey: KEY_A, allowedIps: ['10.8.0.2/32'] }]);
    expect(fs.files.has(`${JOURNAL}.new`)).to.equal(false);
    expect((await open(fs.crashed())).state.peers.has(KEY_A)).to.equal(true);
  });

  it('syncs every directory it makes into its parent: a crash right after the first write keeps it', async () => {
    const fs = new MemoryFs();
    const store = await open(fs);
    await store.commitCreates([{ publicKey: KEY_A, allowedIps: ['10.8.0.2/32'] }]);
    const after = fs.crashed();
    expect(after.dirs.get(DIR)).to.equal(0o700);
    expect(after.dirs.get(`${DIR}/wg0`)).to.equal(0o700);
    expect((await open(after)).state.peers.has(KEY_A)).to.equal(true);
  });
});

describe('state/files: nodeStateFs, on a real directory (issue 28)', () => {
  let root: string;
  beforeEach(() => {
    root = mkdtempSync(path.join(tmpdir(), 'wg-peerd-files-'));
  });
  afterEach(() => rmSync(root, { recursive: true, force: true }));

  async function code(promise: Promise<unknown>): Promise<string | undefined> {
    return ((await rejection(promise)) as NodeJS.ErrnoException).code;
  }

  it('creates only new files (O_EXCL|O_NOFOLLOW), with the exact mode whatever the umask', async () => {
    const file = path.join(root, 'f');
    const handle = await nodeStateFs.create(file, 0o600);
    await handle.write(Buffer.from('x'));
    await handle.sync();
    await handle.close();
    expect(await nodeStateFs.stat(file)).to.deep.include({ kind: 'file', mode: 0o600, size: 1 });
    expect(await code(nodeStateFs.create(file, 0o600))).to.equal('EEXIST');
    symlinkSync(path.join(root, 'elsewhere'), path.join(root, 'link'));
    expect(await code(nodeStateFs.create(path.join(root, 'link'), 0o600))).to.equal('EEXIST');
    expect(await code(nodeStateFs.openAppend(path.join(root, 'link')))).to.equal('ELOOP');
  });

  it('stats without following a link, with the owner, and says whose euid counts', async () => {
    symlinkSync(path.join(root, 'elsewhere'), path.join(root, 'link'));
    const info = await nodeStateFs.stat(path.join(root, 'link'));
    expect(info?.kind).to.equal('symlink');
    expect(info?.uid).to.equal(process.geteuid!());
    expect(nodeStateFs.euid()).to.equal(process.geteuid!());
    expect(await nodeStateFs.stat(path.join(root, 'none'))).to.equal(null);
  });

  it('makes a directory with the exact mode, and refuses one that exists', async () => {
    const dir = path.join(root, 'd');
    await nodeStateFs.mkdir(dir, 0o700);
    await nodeStateFs.syncDir(root);
    expect(await nodeStateFs.stat(dir)).to.deep.include({ kind: 'directory', mode: 0o700 });
    expect(await code(nodeStateFs.mkdir(dir, 0o700))).to.equal('EEXIST');
  });
});

describe('state/files: a read-only state directory (EROFS) restores read-only (issue 28)', () => {
  async function saved(): Promise<MemoryFs> {
    const fs = new MemoryFs();
    const store = await open(fs);
    await store.commitCreates([{ publicKey: KEY_A, allowedIps: ['10.8.0.2/32'] }]);
    await store.recordLimit(KEY_A, 5000);
    await store.close();
    return fs;
  }

  it('opens with the saved state, says why it is read-only, and writes nothing', async () => {
    const fs = await saved();
    const before = Buffer.from(fs.files.get(JOURNAL)!.data);
    fs.readOnly = true;
    const store = await open(fs);
    expect(store.readOnly).to.contain('EROFS');
    expect(store.state.peers.get(KEY_A)?.limit).to.equal(5000);
    expect(fs.files.get(JOURNAL)!.data.equals(before)).to.equal(true);
  });

  it('rejects every record and a new server key with StateReadOnlyError saying what to do, and replaceState keeps memory only', async () => {
    const fs = await saved();
    fs.readOnly = true;
    const store = await open(fs);
    const error = await rejection(store.recordLimit(KEY_A, 1));
    expect(error).to.be.instanceOf(StateReadOnlyError);
    expect(error.message).to.contain(`the state directory ${DIR} is read-only`);
    expect(error.message).to.contain('remount it read-write');
    expect(
      await rejection(store.intendCreates([{ publicKey: 'x', allowedIps: [] }])),
    ).to.be.instanceOf(StateReadOnlyError);
    const key = Buffer.alloc(32, 1);
    const iface = { listenPort: 51820, addresses: ['10.8.0.1/24'], publicKey: KEY_A };
    expect(await rejection(store.saveInterface(key, iface))).to.be.instanceOf(StateReadOnlyError);
    expect(fs.files.has(`${DIR}/wg0/server.key`)).to.equal(false);
    const next = replay(decodeJournal(fs.files.get(JOURNAL)!.data).records);
    next.peers.clear();
    await store.replaceState(next);
    expect(store.state.peers.size).to.equal(0);
    expect(replay(decodeJournal(fs.files.get(JOURNAL)!.data).records).peers.size).to.equal(1);
  });

  it('opens read-only with nothing saved when the state directory cannot even be made', async () => {
    const fs = new MemoryFs();
    fs.readOnly = true;
    const store = await open(fs);
    expect(store.readOnly).to.contain('EROFS');
    expect(store.state.peers.size).to.equal(0);
  });

  it('turns read-only when a write answers EROFS while running (ext4 remounted it after an error)', async () => {
    const fs = await saved();
    const store = await open(fs);
    fs.fail('write', 'EROFS');
    expect(((await rejection(store.recordLimit(KEY_A, 1))) as NodeJS.ErrnoException).code).to.equal(
      'EROFS',
    );
    expect(store.readOnly).to.contain('EROFS');
    expect(await rejection(store.recordLimit(KEY_A, 2))).to.be.instanceOf(StateReadOnlyError);
  });
});
