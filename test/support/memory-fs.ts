/**
 * A StateFs in memory (src/state/files.ts) that keeps apart what was done and what was made
 * durable, so a test can crash it at any instant into any state a POSIX file system may leave,
 * make chosen calls fail, fill it up, and count disk flushes.
 *
 * The crash states are those ALICE found real file systems leave (T. S. Pillai et al., "All File
 * Systems Are Not Created Equal: On the Complexity of Crafting Crash-Consistent Applications",
 * OSDI '14), narrowed to what the state directory does:
 *   1. appends are not atomic: unsynced appended data survives cut at any byte;
 *   2. unsynced appended data may come back as zeros: any subset of its 4 KiB pages reads as
 *      zero-filled holes (the file's size was on disk, its data not: XFS and ext4 writeback);
 *   3. a directory operation (create, mkdir, link, rename, unlink) is on disk only once its
 *      directory was fsync'd; before that a crash keeps a prefix of the directory's operations,
 *      in order (none of them at the least);
 *   4. a rename is atomic: after a crash the name is the old file or the new one, never neither;
 *   5. what fdatasync returned for, in a file whose name is durable, survives.
 * (A truncate never synced comes back as the synced content or the truncated one.)
 *
 * Crashing: `crashed()` is the least a reboot may find (every file as last synced, every
 * directory as last synced), `crashed(n)` adds up to n unsynced appended bytes of each file (no
 * holes, no unsynced directory operation: the meaning it always had), and `crashed(pick)` lets
 * `pick(k)` (an integer in [0, k)) choose every freedom above, in this order: first, for each
 * directory with unsynced operations (in the order of their first one), how many of them persist
 * (pick(ops + 1)); then for each file that survives (directories in path order, once per inode),
 * either, when it was cut back below what was synced, which of the two it holds (pick(2): 0
 * synced), or how many unsynced appended bytes persist (pick(bytes + 1)) and then, for each 4 KiB
 * page from the one holding the synced end up to the end kept, whether it reads as zeros
 * (pick(2) === 1). A seeded generator drives it: `crashState(rng)` is `crashed(pickFrom(rng))`,
 * and fast-check's `fc.infiniteStream(fc.nat())` gives `n => stream.next().value % n`. The result
 * is a new MemoryFs holding that state (all of it durable), with no faults.
 *
 * Faults: `fail(op, code, {after, times, path, partial})` makes chosen calls of an operation
 * (write, sync, truncate, open, create, rename, link, remove, syncDir, mkdir, read, stat, list)
 * fail with an errno (EIO, ENOSPC, EMFILE, EROFS, ...); `failRandomly(pick, {ops, codes, oneIn})`
 * makes any call of the given operations fail with one chance in `oneIn`; `readOnly = true` makes
 * every change fail with EROFS; `heal()` ends them all. A failed write may have written a prefix
 * (`partial`, or what `pick` chooses); a failed sync made nothing durable; `capacity` makes writes
 * past it write what fits and fail with ENOSPC, as write(2) does. `calls` counts calls by
 * operation, `syncs` the fdatasyncs. `crashBefore(k, pick, then)` takes the crash at the instant
 * just before the k-th call from now (`crash` holds it; the file system goes on), so a test can
 * crash between a write and its fdatasync.
 *
 * Set-up: `put(file, data, mode, uid)`, `putDirs(dir)` and `putSymlink(link, target)` place
 * durable files, directories and symbolic links (parents made as needed); `uid` is the daemon's
 * euid (what new files get), `owners` sets another owner of a directory or link, a file's `uid`
 * field its owner. Directories the double never heard of (/, /var/lib) exist and are durable.
 */
import path from 'node:path';
import type { AppendFile, FileInfo, StateFs, WriteFile } from '../../src/state/files';

export const PAGE_SIZE = 4096;

/** An inode: what the file holds now and what a crash would find (hard links share one). */
export interface MemoryFile {
  data: Buffer;
  synced: Buffer;
  mode: number;
  uid: number;
}

export interface MemoryDir {
  mode: number;
  uid: number;
}

export interface MemoryLink {
  target: string;
  uid: number;
}

type Entry =
  | { kind: 'file'; file: MemoryFile }
  | { kind: 'dir'; dir: MemoryDir }
  | { kind: 'symlink'; link: MemoryLink };

/** One directory operation: names set (to an entry) or removed (null), applied together. */
type DirOp = Array<{ name: string; entry: Entry | null }>;

export type FaultOp =
  | 'write'
  | 'sync'
  | 'truncate'
  | 'open'
  | 'create'
  | 'rename'
  | 'link'
  | 'remove'
  | 'syncDir'
  | 'mkdir'
  | 'read'
  | 'stat'
  | 'list';

export type FaultCode = 'EIO' | 'ENOSPC' | 'EMFILE' | 'EROFS' | (string & {});

export interface FaultOptions {
  /** Calls of the operation to let through first (0: the next one fails). */
  after?: number;
  /** How many calls fail (1 unless told; Infinity: every later one). */
  times?: number;
  /** Only calls on a path containing this text count. */
  path?: string;
  /** For a write: bytes written before the error (0 unless told). */
  partial?: number;
}

interface Fault extends Required<Omit<FaultOptions, 'path'>> {
  op: FaultOp;
  code: FaultCode;
  path: string | undefined;
}

const MUTATING: ReadonlySet<FaultOp> = new Set([
  'write',
  'sync',
  'truncate',
  'create',
  'rename',
  'link',
  'remove',
  'syncDir',
  'mkdir',
]);

export function errno(code: string, message: string): NodeJS.ErrnoException {
  const error: NodeJS.ErrnoException = new Error(`${code}: ${message}`);
  error.code = code;
  return error;
}

/** `pick` from a generator of floats in [0, 1) (Math.random, fast-check's, a seeded one). */
/** A seeded generator of floats in [0, 1) (mulberry32): a crash state chosen by a seed. */
export function seeded(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export function pickFrom(rng: () => number): (n: number) => number {
  return (n) => Math.min(n - 1, Math.floor(rng() * n));
}

export class MemoryFs implements StateFs {
  /** Files by path, as they are now (the same object under two names: a hard link). */
  readonly files = new Map<string, MemoryFile>();
  /** Directories by path, with their mode, as they are now (tests may change a mode). */
  readonly dirs = new Map<string, number>();
  /** Symbolic links by path: their target. */
  readonly symlinks = new Map<string, string>();
  /** Owners of directories and symbolic links other than `uid` (files carry their own). */
  readonly owners = new Map<string, number>();
  /** The daemon's euid; what create and mkdir give new files. */
  uid = 1000;
  /** Bytes all files may hold together; a write past it writes what fits and fails with ENOSPC. */
  capacity = Number.POSITIVE_INFINITY;
  /** fdatasync calls on files. */
  syncs = 0;
  /** Calls by operation (every call, failed ones included). */
  readonly calls = new Map<FaultOp, number>();
  /** Every change fails with EROFS (a file system remounted read-only). */
  readOnly = false;
  /** The state a crash left at the instant `crashBefore` chose, once that instant came. */
  crash: MemoryFs | null = null;
  private crashPoint: { at: number; pick: (n: number) => number; then?: () => void } | null = null;

  /** The names a crash keeps: by directory, the entries as of its last fsync. */
  private durable = new Map<string, Map<string, Entry>>();
  /** Directory operations since each directory's last fsync, in order. */
  private pending = new Map<string, DirOp[]>();
  private faults: Fault[] = [];
  private random: {
    pick: (n: number) => number;
    ops: ReadonlySet<FaultOp>;
    codes: readonly FaultCode[];
    oneIn: number;
  } | null = null;

  // ---- set-up and inspection ----------------------------------------------------------------

  /**
   * Puts a file in place as if it had always been there (durable, its directories too; test
   * set-up).
   */
  put(file: string, data: string | Buffer, mode = 0o600, uid = this.uid): void {
    const bytes = Buffer.from(data);
    this.putDirs(path.dirname(file));
    const entry: MemoryFile = { data: bytes, synced: bytes, mode, uid };
    this.files.set(file, entry);
    this.symlinks.delete(file);
    this.durableOf(path.dirname(file)).set(path.basename(file), { kind: 'file', file: entry });
  }

  /** Makes directories (durable, test set-up); existing ones are left as they are. */
  putDirs(dir: string, mode = 0o700): void {
    if (dir === '/' || this.dirs.has(dir)) return;
    this.putDirs(path.dirname(dir), mode);
    this.dirs.set(dir, mode);
    this.durableOf(path.dirname(dir)).set(path.basename(dir), {
      kind: 'dir',
      dir: { mode, uid: this.uid },
    });
  }

  /** Plants a symbolic link (durable; test set-up). */
  putSymlink(link: string, target: string, uid = this.uid): void {
    this.putDirs(path.dirname(link));
    this.symlinks.set(link, target);
    this.owners.set(link, uid);
    this.durableOf(path.dirname(link)).set(path.basename(link), {
      kind: 'symlink',
      link: { target, uid },
    });
  }

  text(file: string): string {
    return this.files.get(file)?.data.toString('utf8') ?? '';
  }

  // ---- faults -------------------------------------------------------------------------------

  /** Makes chosen calls of `op` fail with `code` (see FaultOptions). */
  fail(op: FaultOp, code: FaultCode, options: FaultOptions = {}): void {
    this.faults.push({
      op,
      code,
      after: options.after ?? 0,
      times: options.times ?? 1,
      path: options.path,
      partial: options.partial ?? 0,
    });
  }

  /**
   * Makes each call of `ops` fail, with one chance in `oneIn`, with one of `codes`: both chosen
   * by `pick` (a failed write writes a prefix `pick` chooses too).
   */
  failRandomly(
    pick: (n: number) => number,
    options: { ops: readonly FaultOp[]; codes: readonly FaultCode[]; oneIn: number },
  ): void {
    this.random = { pick, ops: new Set(options.ops), codes: options.codes, oneIn: options.oneIn };
  }

  /**
   * Crashes (into `crash`, as `crashed(pick)` would) at the instant just before the `at`-th call
   * from now, of any operation (0: the next one); `then` runs right after, e.g. to note what was
   * acknowledged by that instant. The file system itself goes on.
   */
  crashBefore(at: number, pick: (n: number) => number, then?: () => void): void {
    this.crash = null;
    this.crashPoint = { at, pick, ...(then ? { then } : {}) };
  }

  /** No more faults (a repaired disk). */
  heal(): void {
    this.faults = [];
    this.random = null;
    this.readOnly = false;
  }

  /** The fault of this call, if any (and `partial` bytes for a write). */
  private fault(op: FaultOp, file: string, size = 0): { error: Error; partial: number } | null {
    this.calls.set(op, (this.calls.get(op) ?? 0) + 1);
    const point = this.crashPoint;
    if (point !== null && point.at-- === 0) {
      this.crashPoint = null;
      this.crash = this.crashed(point.pick);
      point.then?.();
    }
    if (this.readOnly && MUTATING.has(op)) {
      return { error: errno('EROFS', `read-only file system: ${op} ${file}`), partial: 0 };
    }
    for (const fault of this.faults) {
      if (fault.op !== op || fault.times <= 0) continue;
      if (fault.path !== undefined && !file.includes(fault.path)) continue;
      if (fault.after > 0) {
        fault.after--;
        continue;
      }
      fault.times--;
      return {
        error: errno(fault.code, `injected: ${op} ${file}`),
        partial: Math.min(size, fault.partial),
      };
    }
    const random = this.random;
    if (random !== null && random.ops.has(op) && random.pick(random.oneIn) === 0) {
      const code = random.codes[random.pick(random.codes.length)]!;
      const partial = op === 'write' ? random.pick(size + 1) : 0;
      return { error: errno(code, `injected: ${op} ${file}`), partial };
    }
    return null;
  }

  private check(op: FaultOp, file: string): Promise<never> | null {
    const fault = this.fault(op, file);
    return fault === null ? null : Promise.reject(fault.error);
  }

  // ---- the namespace ------------------------------------------------------------------------

  private durableOf(dir: string): Map<string, Entry> {
    let entries = this.durable.get(dir);
    if (!entries) {
      entries = new Map();
      this.durable.set(dir, entries);
    }
    return entries;
  }

  private entryOf(file: string): Entry | null {
    const data = this.files.get(file);
    if (data) return { kind: 'file', file: data };
    const mode = this.dirs.get(file);
    if (mode !== undefined) {
      return { kind: 'dir', dir: { mode, uid: this.owners.get(file) ?? this.uid } };
    }
    const target = this.symlinks.get(file);
    if (target !== undefined) {
      return { kind: 'symlink', link: { target, uid: this.owners.get(file) ?? this.uid } };
    }
    return null;
  }

  private exists(file: string): boolean {
    return this.files.has(file) || this.dirs.has(file) || this.symlinks.has(file);
  }

  /**
   * A directory the double never heard of (/, /var, ...) stands for the system's own: it exists
   * and is durable. One it knows must be there.
   */
  private dirExists(dir: string): boolean {
    if (this.dirs.has(dir)) return true;
    return !this.files.has(dir) && !this.symlinks.has(dir) && !this.known(dir);
  }

  private known(dir: string): boolean {
    for (const [parent, entries] of this.durable) {
      if (parent === path.dirname(dir) && entries.has(path.basename(dir))) return true;
    }
    for (const ops of this.pending.get(path.dirname(dir)) ?? []) {
      if (ops.some((op) => op.name === path.basename(dir))) return true;
    }
    return false;
  }

  /** Records a directory operation: done now, durable after syncDir of `dir`. */
  private dirOp(dir: string, op: DirOp): void {
    const ops = this.pending.get(dir) ?? [];
    ops.push(op);
    this.pending.set(dir, ops);
  }

  private setName(file: string, entry: Entry | null): void {
    this.files.delete(file);
    this.dirs.delete(file);
    this.symlinks.delete(file);
    if (entry === null) {
      this.owners.delete(file);
      return;
    }
    if (entry.kind === 'file') this.files.set(file, entry.file);
    else if (entry.kind === 'dir') {
      this.dirs.set(file, entry.dir.mode);
      if (entry.dir.uid !== this.uid) this.owners.set(file, entry.dir.uid);
    } else {
      this.symlinks.set(file, entry.link.target);
      this.owners.set(file, entry.link.uid);
    }
  }

  private used(): number {
    let total = 0;
    for (const file of new Set(this.files.values())) total += file.data.length;
    return total;
  }

  // ---- StateFs ------------------------------------------------------------------------------

  euid(): number {
    return this.uid;
  }

  stat(file: string): Promise<FileInfo | null> {
    const failed = this.check('stat', file);
    if (failed) return failed;
    const entry = this.entryOf(file);
    if (entry === null) return Promise.resolve(null);
    if (entry.kind === 'file') {
      const { mode, uid, data } = entry.file;
      return Promise.resolve({ kind: 'file', mode, uid, size: data.length });
    }
    if (entry.kind === 'dir') {
      return Promise.resolve({ kind: 'directory', ...entry.dir, size: 4096 });
    }
    return Promise.resolve({ kind: 'symlink', mode: 0o777, uid: entry.link.uid, size: 0 });
  }

  list(dir: string): Promise<string[]> {
    const failed = this.check('list', dir);
    if (failed) return failed;
    if (!this.dirs.has(dir)) return Promise.reject(errno('ENOENT', dir));
    const names: string[] = [];
    for (const map of [this.files, this.dirs, this.symlinks]) {
      for (const name of map.keys())
        if (path.dirname(name) === dir) names.push(path.basename(name));
    }
    return Promise.resolve(names.sort());
  }

  mkdir(dir: string, mode: number): Promise<void> {
    const failed = this.check('mkdir', dir);
    if (failed) return failed;
    if (this.exists(dir)) return Promise.reject(errno('EEXIST', dir));
    if (!this.dirExists(path.dirname(dir))) return Promise.reject(errno('ENOENT', dir));
    const entry: Entry = { kind: 'dir', dir: { mode, uid: this.uid } };
    this.setName(dir, entry);
    this.dirOp(path.dirname(dir), [{ name: path.basename(dir), entry }]);
    return Promise.resolve();
  }

  syncDir(dir: string): Promise<void> {
    const failed = this.check('syncDir', dir);
    if (failed) return failed;
    if (!this.dirExists(dir)) return Promise.reject(errno('ENOENT', dir));
    const entries = this.durableOf(dir);
    for (const op of this.pending.get(dir) ?? []) {
      for (const { name, entry } of op) {
        if (entry === null) entries.delete(name);
        else entries.set(name, entry);
      }
    }
    this.pending.delete(dir);
    return Promise.resolve();
  }

  read(file: string): Promise<Buffer | null> {
    const failed = this.check('read', file);
    if (failed) return failed;
    const entry = this.files.get(file);
    return Promise.resolve(entry ? Buffer.from(entry.data) : null);
  }

  create(file: string, mode: number): Promise<WriteFile> {
    const failed = this.check('create', file);
    if (failed) return failed;
    if (this.exists(file)) return Promise.reject(errno('EEXIST', file));
    if (!this.dirExists(path.dirname(file))) return Promise.reject(errno('ENOENT', file));
    const inode: MemoryFile = {
      data: Buffer.alloc(0),
      synced: Buffer.alloc(0),
      mode,
      uid: this.uid,
    };
    const entry: Entry = { kind: 'file', file: inode };
    this.setName(file, entry);
    this.dirOp(path.dirname(file), [{ name: path.basename(file), entry }]);
    return Promise.resolve(this.handle(file, inode));
  }

  openAppend(file: string): Promise<{ file: AppendFile; size: number }> {
    const failed = this.check('open', file);
    if (failed) return failed;
    if (this.symlinks.has(file)) return Promise.reject(errno('ELOOP', file));
    const inode = this.files.get(file);
    if (!inode) return Promise.reject(errno('ENOENT', file));
    return Promise.resolve({ file: this.handle(file, inode), size: inode.data.length });
  }

  /** A file handle: bound to the inode, whatever name it has later (an orphan keeps taking writes). */
  private handle(file: string, inode: MemoryFile): AppendFile {
    return {
      write: (data) => {
        const fault = this.fault('write', file, data.length);
        const room = Math.max(0, this.capacity - this.used());
        const fits = Math.min(room, data.length, fault?.partial ?? data.length);
        inode.data = Buffer.concat([inode.data, data.subarray(0, fits)]);
        if (fault) return Promise.reject(fault.error);
        if (fits < data.length) {
          return Promise.reject(errno('ENOSPC', `no space left on device writing ${file}`));
        }
        return Promise.resolve();
      },
      sync: () => {
        this.syncs++;
        const failed = this.check('sync', file);
        if (failed) return failed;
        inode.synced = Buffer.from(inode.data);
        return Promise.resolve();
      },
      truncate: (length) => {
        const failed = this.check('truncate', file);
        if (failed) return failed;
        inode.data = inode.data.subarray(0, length);
        return Promise.resolve();
      },
      close: () => Promise.resolve(),
    };
  }

  rename(from: string, to: string): Promise<void> {
    const failed = this.check('rename', `${from} -> ${to}`);
    if (failed) return failed;
    const entry = this.entryOf(from);
    if (entry === null) return Promise.reject(errno('ENOENT', from));
    if (path.dirname(from) !== path.dirname(to)) {
      return Promise.reject(errno('EXDEV', 'the double renames within one directory only'));
    }
    this.setName(from, null);
    this.setName(to, entry);
    this.dirOp(path.dirname(to), [
      { name: path.basename(from), entry: null },
      { name: path.basename(to), entry },
    ]);
    return Promise.resolve();
  }

  link(from: string, to: string): Promise<void> {
    const failed = this.check('link', `${from} -> ${to}`);
    if (failed) return failed;
    const inode = this.files.get(from);
    if (!inode) return Promise.reject(errno('ENOENT', from));
    if (this.exists(to)) return Promise.reject(errno('EEXIST', to));
    const entry: Entry = { kind: 'file', file: inode };
    this.setName(to, entry);
    this.dirOp(path.dirname(to), [{ name: path.basename(to), entry }]);
    return Promise.resolve();
  }

  remove(file: string): Promise<void> {
    const failed = this.check('remove', file);
    if (failed) return failed;
    if (this.dirs.has(file)) return Promise.reject(errno('EISDIR', file));
    if (!this.exists(file)) return Promise.resolve();
    this.setName(file, null);
    this.dirOp(path.dirname(file), [{ name: path.basename(file), entry: null }]);
    return Promise.resolve();
  }

  // ---- crashes ------------------------------------------------------------------------------

  /**
   * The file system a reboot after a crash finds (see the contract at the top): `choice` a number
   * (up to that many unsynced appended bytes of each file, no holes, no unsynced directory
   * operation) or a `pick(n)` that chooses each freedom: per directory with unsynced operations
   * how many of them persisted (pick(ops + 1)); per file, whether an unsynced truncate persisted
   * (pick(2)), how many unsynced appended bytes survive (pick(bytes + 1)), and per 4 KiB page of
   * those whether it reads as zeros (pick(2) === 1).
   */
  crashed(choice: number | ((n: number) => number) | 'all' = 0): MemoryFs {
    const pick = typeof choice === 'function' ? choice : null;
    const after = new MemoryFs();
    after.uid = this.uid;
    // Names: each directory as last synced, plus a prefix of its later operations.
    const names = new Map<string, Map<string, Entry>>();
    for (const [dir, entries] of this.durable) names.set(dir, new Map(entries));
    for (const [dir, ops] of this.pending) {
      const kept = choice === 'all' ? ops.length : pick === null ? 0 : pick(ops.length + 1);
      let entries = names.get(dir);
      if (!entries) {
        entries = new Map();
        names.set(dir, entries);
      }
      for (const op of ops.slice(0, kept)) {
        for (const { name, entry } of op) {
          if (entry === null) entries.delete(name);
          else entries.set(name, entry);
        }
      }
    }
    // A name survives when every directory above it that the double knows survived too.
    const survives = (dir: string): boolean => {
      if (dir === '/' || dir === '.') return true;
      const kept = names.get(path.dirname(dir))?.get(path.basename(dir));
      if (kept !== undefined) return kept.kind === 'dir' && survives(path.dirname(dir));
      // Never heard of (the system's own /var/lib): there; known but not kept: gone.
      return !this.dirs.has(dir) && !this.known(dir) && survives(path.dirname(dir));
    };
    const contents = new Map<MemoryFile, MemoryFile>();
    const sortedDirs = [...names.keys()].sort();
    for (const dir of sortedDirs) {
      if (!survives(dir)) continue;
      for (const [name, entry] of names.get(dir)!) {
        const full = path.join(dir, name);
        if (entry.kind === 'dir') {
          after.dirs.set(full, entry.dir.mode);
          if (entry.dir.uid !== after.uid) after.owners.set(full, entry.dir.uid);
          after.durableOf(dir).set(name, { kind: 'dir', dir: { ...entry.dir } });
        } else if (entry.kind === 'symlink') {
          after.symlinks.set(full, entry.link.target);
          after.owners.set(full, entry.link.uid);
          after.durableOf(dir).set(name, { kind: 'symlink', link: { ...entry.link } });
        } else {
          let inode = contents.get(entry.file);
          if (!inode) {
            const data = crashedContent(entry.file, choice);
            inode = { data, synced: data, mode: entry.file.mode, uid: entry.file.uid };
            contents.set(entry.file, inode);
          }
          after.files.set(full, inode);
          after.durableOf(dir).set(name, { kind: 'file', file: inode });
        }
      }
    }
    return after;
  }

  /**
   * What a restart after kill -9 finds: not a crash of the machine, so the page cache outlives
   * the process and everything done is there, synced or not (directory operations included).
   */
  killed(): MemoryFs {
    return this.crashed('all');
  }

  /** `crashed` driven by a generator of floats in [0, 1) (Math.random, a seeded one). */
  crashState(rng: () => number): MemoryFs {
    return this.crashed(pickFrom(rng));
  }
}

/** What a crash leaves of one file's data (see `crashed`). */
function crashedContent(
  file: MemoryFile,
  choice: number | ((n: number) => number) | 'all',
): Buffer {
  const { data, synced } = file;
  if (choice === 'all') return Buffer.from(data);
  const appended = data.length >= synced.length && data.subarray(0, synced.length).equals(synced);
  if (typeof choice === 'number') {
    if (!appended) return Buffer.from(synced);
    return Buffer.concat([synced, data.subarray(synced.length, synced.length + choice)]);
  }
  if (!appended) return Buffer.from(choice(2) === 0 ? synced : data);
  const tail = data.length - synced.length;
  const end = synced.length + choice(tail + 1);
  const out = Buffer.from(data.subarray(0, end));
  for (let page = Math.floor(synced.length / PAGE_SIZE); page * PAGE_SIZE < end; page++) {
    if (choice(2) === 1) {
      out.fill(0, Math.max(synced.length, page * PAGE_SIZE), Math.min(end, (page + 1) * PAGE_SIZE));
    }
  }
  return out;
}
