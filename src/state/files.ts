/**
 * The few file operations the state directory needs, behind an interface so a test can hand the
 * journal a filesystem that fills up, fails a chosen call, or crashes into any state a POSIX file
 * system may leave (test/support/memory-fs.ts).
 *
 * Durability, as POSIX gives it on Linux: data is on disk once fdatasync(2) on its file returned;
 * a new name (create, mkdir, link, rename, unlink) is on disk once fsync(2) on its DIRECTORY
 * returned. The helpers below are the only ways the state directory writes: `writeNewFile`
 * creates a temporary file with O_CREAT|O_EXCL|O_NOFOLLOW (a planted symbolic link is never
 * followed: it refuses; a stale regular temporary file of a crashed write is removed first),
 * `replaceFile` adds the rename and the directory's fsync, `makeDirectory` follows every mkdir
 * with an fsync of the parent, and `keepAs` makes a durable second name (a hard link).
 */
import { constants, promises as fs } from 'node:fs';
import path from 'node:path';

export interface FileInfo {
  kind: 'file' | 'directory' | 'symlink' | 'other';
  /** Permission bits (mode & 0o7777). */
  mode: number;
  /** The owner's uid. */
  uid: number;
  size: number;
}

export interface WriteFile {
  /** Writes at the end. */
  write(data: Buffer): Promise<void>;
  /** fdatasync(2): what was written is on disk. */
  sync(): Promise<void>;
  close(): Promise<void>;
}

export interface AppendFile extends WriteFile {
  /** Cuts the file back, e.g. to drop the part of a write that failed half-way. */
  truncate(length: number): Promise<void>;
}

export interface StateFs {
  /** lstat(2): never follows a symbolic link; null when nothing is there. */
  stat(file: string): Promise<FileInfo | null>;
  /** The names in a directory (not `.` and `..`). */
  list(dir: string): Promise<string[]>;
  /** Makes one directory with this mode (EEXIST when something is there); durable after syncDir of its parent. */
  mkdir(dir: string, mode: number): Promise<void>;
  /** fsync(2) on a directory: the names created, renamed or removed in it are on disk. */
  syncDir(dir: string): Promise<void>;
  /** The whole file, or null when it does not exist. */
  read(file: string): Promise<Buffer | null>;
  /** Creates a new file, O_WRONLY|O_CREAT|O_EXCL|O_NOFOLLOW, with exactly this mode (EEXIST when anything, a symbolic link included, is there). */
  create(file: string, mode: number): Promise<WriteFile>;
  /** Opens an existing file for appending, O_WRONLY|O_APPEND|O_NOFOLLOW; `size` is its length now. */
  openAppend(file: string): Promise<{ file: AppendFile; size: number }>;
  rename(from: string, to: string): Promise<void>;
  /** A hard link `to` of `from` (EEXIST when `to` exists). */
  link(from: string, to: string): Promise<void>;
  /** unlink(2); nothing there is no error. */
  remove(file: string): Promise<void>;
  /** The effective uid every state file must be owned by. */
  euid(): number;
}

/** A file of the state directory that must not be used as it is (the start says it in one line). */
export class UnsafeFileError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'UnsafeFileError';
  }
}

export function errnoOf(error: unknown): string | undefined {
  return (error as NodeJS.ErrnoException | undefined)?.code;
}

/**
 * Creates `file` with `data` through `<file>.new`, synced, and returns the temporary's path (not
 * yet renamed). A symbolic link at the temporary name refuses (UnsafeFileError); a regular file
 * there (the leftover of a write a crash cut) is removed first.
 */
export async function writeNewFile(
  fsys: StateFs,
  file: string,
  data: Buffer,
  mode: number,
): Promise<string> {
  const temporary = `${file}.new`;
  const there = await fsys.stat(temporary);
  if (there !== null) {
    if (there.kind !== 'file') {
      throw new UnsafeFileError(
        `${temporary} is a ${there.kind === 'symlink' ? 'symbolic link' : there.kind}, not a ` +
          `file wg-peerd left: it is never followed; remove it (rm ${temporary}) and start again`,
      );
    }
    await fsys.remove(temporary);
  }
  const handle = await fsys.create(temporary, mode);
  try {
    await handle.write(data);
    await handle.sync();
  } finally {
    await handle.close();
  }
  return temporary;
}

/** Writes a whole file atomically and durably: a new temporary file, fsync, rename, fsync of the directory. */
export async function replaceFile(
  fsys: StateFs,
  file: string,
  data: Buffer,
  mode: number,
): Promise<void> {
  const temporary = await writeNewFile(fsys, file, data, mode);
  await fsys.rename(temporary, file);
  await fsys.syncDir(path.dirname(file));
}

/** Makes `to` a durable second name of `from`'s current content (a hard link, replacing `to`). */
export async function keepAs(fsys: StateFs, from: string, to: string): Promise<void> {
  const temporary = `${to}.link`;
  await fsys.remove(temporary);
  await fsys.link(from, temporary);
  await fsys.rename(temporary, to);
  await fsys.syncDir(path.dirname(to));
}

/** mkdir, then fsync of the parent: the new directory survives a crash. */
export async function makeDirectory(fsys: StateFs, dir: string, mode: number): Promise<void> {
  await fsys.mkdir(dir, mode);
  await fsys.syncDir(path.dirname(dir));
}

function isMissing(error: unknown): boolean {
  return errnoOf(error) === 'ENOENT';
}

function kindOf(stats: { isFile(): boolean; isDirectory(): boolean; isSymbolicLink(): boolean }) {
  if (stats.isSymbolicLink()) return 'symlink' as const;
  if (stats.isFile()) return 'file' as const;
  if (stats.isDirectory()) return 'directory' as const;
  return 'other' as const;
}

function appendHandle(handle: fs.FileHandle): AppendFile {
  return {
    write: async (data) => {
      let written = 0;
      while (written < data.length) {
        const { bytesWritten } = await handle.write(data, written, data.length - written);
        written += bytesWritten;
      }
    },
    sync: () => handle.datasync(),
    truncate: (length) => handle.truncate(length),
    close: () => handle.close(),
  };
}

export const nodeStateFs: StateFs = {
  async stat(file) {
    try {
      const stats = await fs.lstat(file);
      return { kind: kindOf(stats), mode: stats.mode & 0o7777, uid: stats.uid, size: stats.size };
    } catch (error) {
      if (isMissing(error)) return null;
      throw error;
    }
  },
  list(dir) {
    return fs.readdir(dir);
  },
  async mkdir(dir, mode) {
    await fs.mkdir(dir, { mode });
    await fs.chmod(dir, mode); // the umask may have narrowed it; never widened
  },
  async syncDir(dir) {
    const handle = await fs.open(dir, constants.O_RDONLY | constants.O_DIRECTORY);
    try {
      await handle.sync();
    } finally {
      await handle.close();
    }
  },
  async read(file) {
    try {
      return await fs.readFile(file);
    } catch (error) {
      if (isMissing(error)) return null;
      throw error;
    }
  },
  async create(file, mode) {
    const flags = constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW;
    const handle = await fs.open(file, flags, mode);
    try {
      await handle.chmod(mode); // the umask may have narrowed it; never widened
    } catch (error) {
      await handle.close();
      throw error;
    }
    return appendHandle(handle);
  },
  async openAppend(file) {
    const handle = await fs.open(
      file,
      constants.O_WRONLY | constants.O_APPEND | constants.O_NOFOLLOW,
    );
    try {
      return { file: appendHandle(handle), size: (await handle.stat()).size };
    } catch (error) {
      await handle.close();
      throw error;
    }
  },
  rename(from, to) {
    return fs.rename(from, to);
  },
  link(from, to) {
    return fs.link(from, to);
  },
  async remove(file) {
    await fs.rm(file, { force: true });
  },
  euid() {
    return process.geteuid?.() ?? 0;
  },
};
