/**
 * A StateFs in memory (src/state/files.ts) that keeps apart what was written and what was made
 * durable, so a test can crash it at any instant (`crashed()`: what a reboot would find, with as
 * much of the unsynced tail as the test says made it to disk), fill it up (`capacity`: a write
 * past it writes what fits and fails with ENOSPC, as write(2) does), and count disk flushes.
 * `replace` is atomic and durable at once, as the real one is (temp file, fsync, rename, fsync of
 * the directory); `keep` makes a durable second name.
 */
import type { AppendFile, StateFs } from '../../src/state/files';

interface MemoryFile {
  /** What the file holds now. */
  data: Buffer;
  /** What it would hold after a crash. */
  synced: Buffer;
  mode: number;
}

function errno(code: string, message: string): NodeJS.ErrnoException {
  const error: NodeJS.ErrnoException = new Error(`${code}: ${message}`);
  error.code = code;
  return error;
}

export class MemoryFs implements StateFs {
  readonly files = new Map<string, MemoryFile>();
  readonly dirs = new Map<string, number>();
  /** Bytes all files may hold together; a write past it fails with ENOSPC. */
  capacity = Number.POSITIVE_INFINITY;
  /** fdatasync calls on appended files. */
  syncs = 0;

  mode(file: string): Promise<number | null> {
    return Promise.resolve(this.files.get(file)?.mode ?? this.dirs.get(file) ?? null);
  }

  mkdir(dir: string, mode: number): Promise<void> {
    if (!this.dirs.has(dir)) this.dirs.set(dir, mode);
    return Promise.resolve();
  }

  read(file: string): Promise<Buffer | null> {
    const entry = this.files.get(file);
    return Promise.resolve(entry ? Buffer.from(entry.data) : null);
  }

  /** Puts a file in place as if it had always been there (test set-up). */
  put(file: string, data: string | Buffer, mode = 0o600): void {
    const bytes = Buffer.from(data);
    this.files.set(file, { data: bytes, synced: bytes, mode });
  }

  text(file: string): string {
    return this.files.get(file)?.data.toString('utf8') ?? '';
  }

  private used(except?: string): number {
    let total = 0;
    for (const [name, file] of this.files) if (name !== except) total += file.data.length;
    return total;
  }

  replace(file: string, data: Buffer, mode: number): Promise<void> {
    if (this.used(file) + data.length > this.capacity) {
      return Promise.reject(errno('ENOSPC', `no space left to write ${file}`));
    }
    const bytes = Buffer.from(data);
    this.files.set(file, { data: bytes, synced: bytes, mode });
    return Promise.resolve();
  }

  keep(from: string, to: string): Promise<void> {
    const source = this.files.get(from);
    if (!source) return Promise.reject(errno('ENOENT', from));
    this.files.set(to, { data: source.data, synced: source.synced, mode: source.mode });
    return Promise.resolve();
  }

  openAppend(file: string, mode: number): Promise<{ file: AppendFile; size: number }> {
    if (!this.files.has(file))
      this.files.set(file, { data: Buffer.alloc(0), synced: Buffer.alloc(0), mode });
    const entry = (): MemoryFile => this.files.get(file)!;
    const handle: AppendFile = {
      write: (data) => {
        const room = Math.max(0, this.capacity - this.used());
        const fits = data.subarray(0, Math.min(room, data.length));
        entry().data = Buffer.concat([entry().data, fits]);
        if (fits.length < data.length) {
          return Promise.reject(errno('ENOSPC', `no space left on device writing ${file}`));
        }
        return Promise.resolve();
      },
      sync: () => {
        this.syncs++;
        entry().synced = Buffer.from(entry().data);
        return Promise.resolve();
      },
      truncate: (length) => {
        entry().data = entry().data.subarray(0, length);
        return Promise.resolve();
      },
      close: () => Promise.resolve(),
    };
    return Promise.resolve({ file: handle, size: entry().data.length });
  }

  /**
   * The filesystem a reboot after a crash finds: every file as last synced, plus up to
   * `unsyncedBytes` of what was written after that (a torn tail).
   */
  crashed(unsyncedBytes = 0): MemoryFs {
    const after = new MemoryFs();
    for (const [dir, mode] of this.dirs) after.dirs.set(dir, mode);
    for (const [name, file] of this.files) {
      const extra = file.data.subarray(file.synced.length, file.synced.length + unsyncedBytes);
      const data = Buffer.concat([file.synced, extra]);
      after.files.set(name, { data, synced: data, mode: file.mode });
    }
    return after;
  }
}
