/**
 * The crash-model test's disk (test/unit/state/crash-model.test.ts): a StateFs over MemoryFs
 * (test/support/memory-fs.ts) that lets a crash land between any two file-system calls, fails
 * chosen calls with EIO, ENOSPC or EROFS, and gives the image a reboot finds. Contract:
 * - Every call waits one turn of the event loop before it acts, as a system call on the thread
 *   pool would, so a crash taken at a turn can fall between a journal's write and its fdatasync.
 * - Faults are numbered over the calls a running daemon makes on its open journal (write, sync,
 *   truncate), counted from `arm()`: the n-th such call fails as its `DiskFault` says (a write
 *   that fails may have written a prefix first, as write(2) does; a failed sync syncs nothing; a
 *   failed truncate cuts nothing).
 * - `crashImage` is the one place that decides what survives a crash: a power cut leaves one of
 *   the states ALICE found file systems leave (test/support/memory-fs.ts: unsynced appended
 *   bytes cut at any byte, zero-filled holes in unsynced pages, directory operations not yet
 *   durable), chosen by a seed (`alice`), or, without one, a prefix of each file's unsynced bytes;
 *   kill -9 and a restart keep everything done (the page cache outlives the process).
 * - A fault with `call: 'open'` fails the n-th call a compaction makes (create, rename, directory
 *   sync, open: EMFILE or EIO), counted apart from the journal's writes.
 */
import type { AppendFile, FileInfo, StateFs, WriteFile } from '../../../../src/state/files';
import { MemoryFs, seeded } from '../../../support/memory-fs';

/** What a crash keeps of the bytes written but not yet synced (per file). */
export interface CrashChoice {
  unsyncedBytes: number;
  /**
   * Not a power cut but kill -9 and a restart in the same boot: the page cache outlives the
   * process, so every byte written is there, synced or not (and the kernel keeps its state).
   */
  restart?: boolean;
  /** A power cut into one of ALICE's crash states, chosen by this seed; absent: the prefix. */
  alice?: number | null;
}

export type FaultCall = 'write' | 'sync' | 'truncate';

export interface DiskFault {
  /**
   * Index, from arm(), of the journal call that fails: of its writes, fdatasyncs and truncates;
   * with `call: 'open'`, of the calls a compaction makes (create, rename, directory sync, open),
   * counted apart.
   */
  at: number;
  call?: 'open';
  /** For a write or an open; a failed sync or truncate is EIO. */
  code: 'EIO' | 'ENOSPC' | 'EROFS' | 'EMFILE';
  /** For a write: the fraction of its bytes that reach the file before it fails (0 to 1). */
  written: number;
}

function errno(code: string, message: string): NodeJS.ErrnoException {
  const error: NodeJS.ErrnoException = new Error(`${code}: ${message}`);
  error.code = code;
  return error;
}

const turn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

/**
 * The image a reboot finds after a crash of `disk` now. THE crash adapter: switch it to the
 * ALICE states of the richer MemoryFs here.
 */
export function crashImage(disk: MemoryFs, choice: CrashChoice): MemoryFs {
  if (choice.restart === true) return disk.killed();
  if (choice.alice == null) return disk.crashed(choice.unsyncedBytes);
  return disk.crashState(seeded(choice.alice));
}

export class ModelDisk implements StateFs {
  readonly memory: MemoryFs;
  /** Journal calls since arm(); null: faults not armed (start-up, restore). */
  private calls: number | null = null;
  /** Compaction calls since arm(); null: not armed. */
  private opens: number | null = null;
  private faults: readonly DiskFault[] = [];
  /** Faults that fired: the call, its kind and errno, for the trace. */
  readonly fired: string[] = [];

  constructor(memory = new MemoryFs()) {
    this.memory = memory;
  }

  /** From now on, the journal calls count, and the listed ones fail. */
  arm(faults: readonly DiskFault[]): void {
    this.calls = 0;
    this.opens = 0;
    this.faults = faults;
  }

  /** The fault for the next compaction call (create, rename, directory sync, open), if due. */
  private openFault(kind: string, file: string): void {
    if (this.opens === null) return;
    const index = this.opens++;
    const fault = this.faults.find((f) => f.call === 'open' && f.at === index);
    if (fault === undefined) return;
    this.fired.push(`${kind} #${index}: ${fault.code}`);
    throw errno(fault.code, `${kind} ${file}`);
  }

  /** The fault for the next journal call of this kind, if one is due. */
  private fault(kind: FaultCall): DiskFault | undefined {
    if (this.calls === null) return undefined;
    const index = this.calls++;
    const fault = this.faults.find((f) => f.call === undefined && f.at === index);
    if (fault === undefined) return undefined;
    const code = kind === 'write' ? fault.code : 'EIO';
    this.fired.push(`${kind} #${index}: ${code}`);
    return { ...fault, code };
  }

  euid(): number {
    return this.memory.euid();
  }

  async stat(file: string): Promise<FileInfo | null> {
    await turn();
    return this.memory.stat(file);
  }

  async list(dir: string): Promise<string[]> {
    await turn();
    return this.memory.list(dir);
  }

  async mkdir(dir: string, mode: number): Promise<void> {
    await turn();
    return this.memory.mkdir(dir, mode);
  }

  async syncDir(dir: string): Promise<void> {
    await turn();
    this.openFault('syncDir', dir);
    return this.memory.syncDir(dir);
  }

  async read(file: string): Promise<Buffer | null> {
    await turn();
    return this.memory.read(file);
  }

  async create(file: string, mode: number): Promise<WriteFile> {
    await turn();
    this.openFault('create', file);
    return this.memory.create(file, mode);
  }

  async rename(from: string, to: string): Promise<void> {
    await turn();
    this.openFault('rename', to);
    return this.memory.rename(from, to);
  }

  async link(from: string, to: string): Promise<void> {
    await turn();
    return this.memory.link(from, to);
  }

  async remove(file: string): Promise<void> {
    await turn();
    return this.memory.remove(file);
  }

  async openAppend(file: string): Promise<{ file: AppendFile; size: number }> {
    await turn();
    this.openFault('open', file);
    const opened = await this.memory.openAppend(file);
    const inner = opened.file;
    const handle: AppendFile = {
      write: async (data) => {
        await turn();
        const fault = this.fault('write');
        if (fault === undefined) return inner.write(data);
        const prefix = Math.floor(data.length * fault.written);
        if (prefix > 0) await inner.write(data.subarray(0, prefix));
        throw errno(fault.code, `writing ${file}`);
      },
      sync: async () => {
        await turn();
        if (this.fault('sync') !== undefined) throw errno('EIO', `fdatasync ${file}`);
        return inner.sync();
      },
      truncate: async (length) => {
        await turn();
        if (this.fault('truncate') !== undefined) throw errno('EIO', `ftruncate ${file}`);
        return inner.truncate(length);
      },
      close: () => inner.close(),
    };
    return { file: handle, size: opened.size };
  }
}
