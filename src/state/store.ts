/**
 * The state directory (`--state-dir`): per interface, a journal of what the daemon would need to
 * put the host back after a reboot, and the server's private key when the daemon created the
 * interface. Layout: `DIR/<interface>/journal` (`journal.prev`: the generation before the last
 * compaction) and `DIR/<interface>/server.key` (base64, mode 0600). The directory is the
 * daemon's alone: a state dir or file that group or others may read refuses the start, as does a
 * journal that is damaged or describes another interface; the start then changes nothing on
 * disk. Every write resolves once it is on disk (journal.ts); nothing here knows the kernel or
 * HTTP: the domain decides what to write and when (src/peers/durable.ts, src/peers/restore.ts).
 */
import path from 'node:path';
import { promises as fs } from 'node:fs';
import { type StateFs, nodeStateFs } from './files';
import { JOURNAL_MODE, Journal, type JournalStats } from './journal';
import {
  JournalCorruptError,
  type SavedCap,
  type SavedExhaustion,
  type SavedInterface,
  type SavedPeer,
  type SavedState,
  decodeJournal,
  peerRecord,
  replay,
} from './records';

export const STATE_DIR_MODE = 0o700;
export const KEY_FILE_MODE = 0o600;
export const JOURNAL_FILE = 'journal';
export const KEY_FILE = 'server.key';
export const BOOT_ID_FILE = '/proc/sys/kernel/random/boot_id';

/** The state directory cannot be used as it is: the start stops with this one line (exit 2). */
export class StateDirError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'StateDirError';
  }
}

export interface OpenOptions {
  dir: string;
  interfaceName: string;
  fs?: StateFs;
}

function octal(mode: number): string {
  return `0${(mode & 0o777).toString(8)}`;
}

async function checkPrivate(fsys: StateFs, file: string, what: string): Promise<void> {
  const mode = await fsys.mode(file);
  if (mode !== null && (mode & 0o077) !== 0) {
    throw new StateDirError(
      `${what} ${file} has mode ${octal(mode)}: group and others must have no access ` +
        `(it names every peer${what.includes('key') ? ' and holds the server key' : ''}); ` +
        `run: chmod go= ${file}`,
    );
  }
}

/** The boot this kernel runs (a new one after every reboot). */
export async function readBootId(file = BOOT_ID_FILE): Promise<string> {
  return (await fs.readFile(file, 'utf8')).trim();
}

/** A peer being created: its key and allowed IPs. */
export interface NewPeer {
  publicKey: string;
  allowedIps: readonly string[];
}

export class StateStore {
  private constructor(
    private readonly fsys: StateFs,
    readonly dir: string,
    readonly interfaceName: string,
    private readonly journal: Journal,
    /** The journal held a torn last line (a write that never completed), dropped at load. */
    readonly tornTail: boolean,
  ) {}

  /**
   * Checks the directory and loads the journal; refuses (StateDirError) a directory or file
   * that group or others may read, a damaged journal, one of another interface. Only after all
   * checks pass does it write: the journal anew (compacted), the old one kept as journal.prev.
   */
  static async open(options: OpenOptions): Promise<StateStore> {
    const fsys = options.fs ?? nodeStateFs;
    const root = path.resolve(options.dir);
    const dir = path.join(root, options.interfaceName);
    if ((await fsys.mode(root)) === null) await fsys.mkdir(root, STATE_DIR_MODE);
    await checkPrivate(fsys, root, 'state directory');
    if ((await fsys.mode(dir)) === null) await fsys.mkdir(dir, STATE_DIR_MODE);
    await checkPrivate(fsys, dir, 'state directory');
    const journalPath = path.join(dir, JOURNAL_FILE);
    await checkPrivate(fsys, journalPath, 'journal');
    await checkPrivate(fsys, path.join(dir, KEY_FILE), 'server key file');
    const bytes = await fsys.read(journalPath);
    let state: SavedState;
    let tornTail = false;
    try {
      const decoded = decodeJournal(bytes ?? Buffer.alloc(0));
      state = replay(decoded.records);
      tornTail = decoded.tornTail;
    } catch (error) {
      if (!(error instanceof JournalCorruptError)) throw error;
      throw new StateDirError(
        `journal ${journalPath} is damaged: ${error.message}; nothing was changed. Move it ` +
          `aside to start from the kernel's state, or put back the previous generation: ` +
          `cp ${journalPath}.prev ${journalPath}`,
      );
    }
    if (state.boot !== null && state.boot.interfaceName !== options.interfaceName) {
      throw new StateDirError(
        `journal ${journalPath} describes interface ${state.boot.interfaceName}, not ` +
          `${options.interfaceName}; nothing was changed. Give each interface its own ` +
          `directory (DIR/<interface>/), or move the journal aside`,
      );
    }
    const journal = new Journal(fsys, journalPath, state);
    await journal.open();
    return new StateStore(fsys, root, options.interfaceName, journal, tornTail);
  }

  /** What the journal holds now (every record in it is on disk). */
  get state(): Readonly<SavedState> {
    return this.journal.state;
  }

  stats(): JournalStats {
    return this.journal.stats();
  }

  get journalPath(): string {
    return this.journal.path;
  }

  get keyPath(): string {
    return path.join(this.dir, this.interfaceName, KEY_FILE);
  }

  /** The server's private key (32 bytes), or null when none is saved. */
  async readServerKey(): Promise<Buffer | null> {
    const text = await this.fsys.read(this.keyPath);
    if (text === null) return null;
    const key = Buffer.from(text.toString('utf8').trim(), 'base64');
    if (key.length !== 32) {
      throw new StateDirError(
        `server key file ${this.keyPath} does not hold a base64 key of 32 bytes; ` +
          'put back a good copy, or move it aside (the interface then gets a new key)',
      );
    }
    return key;
  }

  /** Saves the key of an interface the daemon is about to create, with its settings. */
  async saveInterface(privateKey: Buffer, iface: SavedInterface): Promise<void> {
    await this.fsys.replace(
      this.keyPath,
      Buffer.from(`${privateKey.toString('base64')}\n`),
      KEY_FILE_MODE,
    );
    await this.journal.append({ t: 'iface', ...iface });
  }

  /** Replaces the whole saved state at once (after a restore: the journal follows the host). */
  replaceState(next: SavedState): Promise<void> {
    return this.journal.replaceState(next);
  }

  /** Saved BEFORE the peers are added to the kernel: a create that never commits is undone. */
  intendCreates(peers: readonly NewPeer[]): Promise<void> {
    return this.journal.append(
      ...peers.map((p) => ({ t: 'intent' as const, k: p.publicKey, ips: [...p.allowedIps] })),
    );
  }

  /** Saved once the kernel has the peers, before anybody is told of them. */
  commitCreates(peers: readonly NewPeer[]): Promise<void> {
    return this.recordPeers(
      peers.map((p) => ({
        publicKey: p.publicKey,
        allowedIps: [...p.allowedIps],
        limit: null,
        cap: null,
      })),
    );
  }

  abortCreates(publicKeys: readonly string[]): Promise<void> {
    return this.journal.append(...publicKeys.map((k) => ({ t: 'abort' as const, k })));
  }

  recordDelete(publicKey: string): Promise<void> {
    return this.journal.append({ t: 'del', k: publicKey });
  }

  recordLimit(publicKey: string, bytesPerSecond: number | null): Promise<void> {
    return this.journal.append({ t: 'limit', k: publicKey, bps: bytesPerSecond });
  }

  recordCap(publicKey: string, cap: SavedCap | null): Promise<void> {
    return this.journal.append({ t: 'cap', k: publicKey, cap });
  }

  recordSuspension(publicKey: string, suspended: boolean): Promise<void> {
    return this.journal.append({ t: 'susp', k: publicKey, s: suspended });
  }

  /** When the peer's cap ran out (issue 19), or null once it has room again. */
  recordExhaustion(publicKey: string, exhaustion: SavedExhaustion | null): Promise<void> {
    return this.journal.append(
      exhaustion === null
        ? { t: 'exh', k: publicKey, at: null }
        : { t: 'exh', k: publicKey, q: exhaustion.quotaBytes, at: exhaustion.at },
    );
  }

  /** Puts peers back as whole records (adopted peers, a compensation after a failed change). */
  recordPeers(peers: readonly SavedPeer[]): Promise<void> {
    return this.journal.append(...peers.map(peerRecord));
  }

  /** Forgets peers (the kernel no longer has them) and intents, in one write. */
  forget(publicKeys: readonly string[]): Promise<void> {
    return this.journal.append(...publicKeys.map((k) => ({ t: 'del' as const, k })));
  }

  /**
   * Saves the bytes each cap has counted, only where they changed since the last save.
   * Returns how many counters were written.
   */
  async checkpointUsage(usage: ReadonlyMap<string, number>): Promise<number> {
    const changed: Record<string, number> = {};
    let count = 0;
    for (const [publicKey, used] of usage) {
      const cap = this.journal.state.peers.get(publicKey)?.cap;
      if (cap && cap.usedBytes !== used) {
        changed[publicKey] = used;
        count++;
      }
    }
    if (count > 0) await this.journal.append({ t: 'usage', u: changed });
    return count;
  }

  close(): Promise<void> {
    return this.journal.close();
  }
}

export { JOURNAL_MODE };
