/**
 * The few file operations the state directory needs, behind an interface so a test can hand the
 * journal a filesystem that fills up, tears a write or crashes (test/support/memory-fs.ts).
 *
 * Durability, as POSIX gives it on Linux: data is on disk once fdatasync(2) on its file returned;
 * a rename(2) or a new name is on disk once fsync(2) on the DIRECTORY returned. `replace` does
 * both, so a file it wrote is either wholly the old one or wholly the new one after any crash.
 */
import { constants, promises as fs } from 'node:fs';
import path from 'node:path';

export interface AppendFile {
  /** Appends at the end (O_APPEND). */
  write(data: Buffer): Promise<void>;
  /** fdatasync(2): what was written is on disk. */
  sync(): Promise<void>;
  /** Cuts the file back, e.g. to drop the part of a write that failed half-way. */
  truncate(length: number): Promise<void>;
  close(): Promise<void>;
}

export interface StateFs {
  /** Permission bits (mode & 0o7777), or null when nothing is there. */
  mode(file: string): Promise<number | null>;
  /** Makes the directory (and its parents) with this mode; an existing one is left as it is. */
  mkdir(dir: string, mode: number): Promise<void>;
  /** The whole file, or null when it does not exist. */
  read(file: string): Promise<Buffer | null>;
  /** Writes a whole file atomically and durably: a temporary file, fsync, rename, fsync of the directory. */
  replace(file: string, data: Buffer, mode: number): Promise<void>;
  /** Makes `to` a durable second name of `from`'s current content (a hard link, replacing `to`). */
  keep(from: string, to: string): Promise<void>;
  /** Opens for appending, creating it with this mode; `size` is its length now. */
  openAppend(file: string, mode: number): Promise<{ file: AppendFile; size: number }>;
}

async function syncDirectory(dir: string): Promise<void> {
  const handle = await fs.open(dir, constants.O_RDONLY | constants.O_DIRECTORY);
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

function isMissing(error: unknown): boolean {
  return (error as NodeJS.ErrnoException | undefined)?.code === 'ENOENT';
}

export const nodeStateFs: StateFs = {
  async mode(file) {
    try {
      return (await fs.stat(file)).mode & 0o7777;
    } catch (error) {
      if (isMissing(error)) return null;
      throw error;
    }
  },
  async mkdir(dir, mode) {
    await fs.mkdir(dir, { recursive: true, mode });
  },
  async read(file) {
    try {
      return await fs.readFile(file);
    } catch (error) {
      if (isMissing(error)) return null;
      throw error;
    }
  },
  async replace(file, data, mode) {
    const temporary = `${file}.new`;
    const handle = await fs.open(temporary, 'w', mode);
    try {
      await handle.chmod(mode); // the umask may have narrowed it; never widened
      await handle.writeFile(data);
      await handle.sync();
    } finally {
      await handle.close();
    }
    await fs.rename(temporary, file);
    await syncDirectory(path.dirname(file));
  },
  async keep(from, to) {
    const temporary = `${to}.link`;
    await fs.rm(temporary, { force: true });
    await fs.link(from, temporary);
    await fs.rename(temporary, to);
    await syncDirectory(path.dirname(to));
  },
  async openAppend(file, mode) {
    const handle = await fs.open(file, 'a', mode);
    const size = (await handle.stat()).size;
    return {
      size,
      file: {
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
      },
    };
  },
};
