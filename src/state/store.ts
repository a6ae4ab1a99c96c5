/**
 * The state directory (`--state-dir`): per interface, a journal of what the daemon would need to
 * put the host back after a reboot, and the server's private key when the daemon created the
 * interface. Layout: `DIR/<interface>/journal` (`journal.prev`: the generation before the last
 * compaction), `DIR/<interface>/server.key` (base64, mode 0600) and, with webhooks,
 * `DIR/<interface>/outbox` (their pending deliveries, outbox.ts). The directory is the
 * daemon's alone: a state dir or file that group or others may read, or that another user owns,
 * refuses the start, as does a journal damaged before its last batch (salvage.ts keeps what is
 * good) or one that describes another interface; the start then changes nothing on disk. A torn
 * last batch (a write a crash cut) is dropped and said in `tornTail`; a read-only file system
 * (EROFS) loads the state and takes no writes (`readOnly`). Every write resolves once it is on disk (journal.ts); nothing here knows the kernel or
 * HTTP: the domain decides what to write and when (src/peers/durable.ts, src/peers/restore.ts).
 */
import path from 'node:path';
import { promises as fs } from 'node:fs';
import {
  type FileInfo,
  type StateFs,
  UnsafeFileError,
  errnoOf,
  makeDirectory,
  nodeStateFs,
  replaceFile,
} from './files';
import { JOURNAL_MODE, Journal, type JournalStats, StateReadOnlyError } from './journal';
import { OUTBOX_FILE, Outbox, OutboxFileError, type OutboxOpened } from './outbox';
import {
  JournalCorruptError,
  type SavedCap,
  type SavedExhaustion,
  type SavedInterface,
  type SavedPeer,
  type SavedState,
  type TornTail,
  decodeJournal,
  emptyState,
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

function checkPrivate(info: FileInfo | null, file: string, what: string): void {
  if (info !== null && (info.mode & 0o077) !== 0) {
    throw new StateDirError(
      `${what} ${file} has mode ${octal(info.mode)}: group and others must have no access ` +
        `(it names every peer${what.includes('key') ? ' and holds the server key' : ''}); ` +
        `run: chmod go= ${file}`,
    );
  }
}

/** Owned by the daemon's user, else another user could read or swap what it restores. */
function checkOwner(info: FileInfo | null, file: string, what: string, euid: number): void {
  if (info !== null && info.uid !== euid) {
    throw new StateDirError(
      `${what} ${file} is owned by uid ${info.uid}, not by wg-peerd's user (uid ${euid}); ` +
        `nothing was changed. Check who made it, then run: chown ${euid} ${file}`,
    );
  }
}

function checkKind(info: FileInfo | null, file: string, what: string, kind: FileInfo['kind']) {
  if (info !== null && info.kind !== kind) {
    const is = info.kind === 'symlink' ? 'a symbolic link' : `a ${info.kind}`;
    throw new StateDirError(
      `${what} ${file} is ${is}, not a ${kind}; it is never followed. Move it aside`,
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
  /** Its preshared key, base64 (issue 31): in the commit only, never in the intent. */
  presharedKey?: string;
  /** Its name (issue 31), in the commit. */
  name?: string;
  /** Its expiry (issue 31, ms since the epoch), in the commit. */
  expiresAt?: number;
}

/** What the checks of `open` found in one directory of the state dir. */
async function checkDirectory(
  fsys: StateFs,
  dir: string,
  euid: number,
): Promise<'present' | 'made' | { readOnly: string }> {
  let info = await fsys.stat(dir);
  if (info === null) {
    try {
      await makeDirectory(fsys, dir, STATE_DIR_MODE);
    } catch (error) {
      if (errnoOf(error) === 'EROFS') return { readOnly: (error as Error).message };
      throw error;
    }
    info = await fsys.stat(dir);
    if (info === null) return 'made';
  }
  checkKind(info, dir, 'state directory', 'directory');
  checkOwner(info, dir, 'state directory', euid);
  checkPrivate(info, dir, 'state directory');
  return 'present';
}

/**
 * Loads the journal's bytes: its records, or StateDirError for damage before its last batch
 * (with the salvage command that keeps what can be kept).
 */
function loadJournal(bytes: Buffer, journalPath: string, root: string, interfaceName: string) {
  try {
    return decodeJournal(bytes);
  } catch (error) {
    if (!(error instanceof JournalCorruptError)) throw error;
    throw new StateDirError(
      `journal ${journalPath} is damaged at byte offset ${error.offset} (line ${error.line}: ` +
        `${error.reason}) and acknowledged records follow it; nothing was changed. Keep what ` +
        `is good and set the rest aside with: wg-peerd state salvage --state-dir ${root} ` +
        `--interface ${interfaceName}`,
    );
  }
}

export class StateStore {
  private constructor(
    private readonly fsys: StateFs,
    readonly dir: string,
    readonly interfaceName: string,
    private readonly journal: Journal,
    /** What the start dropped after the journal's last whole batch (a write a crash cut), or null. */
    readonly tornTail: TornTail | null,
  ) {}

  /**
   * Checks the directory and loads the journal; refuses (StateDirError) a directory or file
   * that group or others may read or another user owns, a damaged journal, one of another
   * interface. Only after all checks pass does it write: the journal anew (compacted), the old
   * one kept as journal.prev. A read-only file system (EROFS) opens the store read-only instead.
   */
  static async open(options: OpenOptions): Promise<StateStore> {
    const fsys = options.fs ?? nodeStateFs;
    const euid = fsys.euid();
    const root = path.resolve(options.dir);
    const dir = path.join(root, options.interfaceName);
    const journalPath = path.join(dir, JOURNAL_FILE);
    const readOnly = (reason: string): StateStore => {
      const journal = new Journal(fsys, journalPath, emptyState());
      journal.setReadOnly(reason);
      return new StateStore(fsys, root, options.interfaceName, journal, null);
    };
    const top = await checkDirectory(fsys, root, euid);
    if (typeof top === 'object') return readOnly(top.readOnly);
    const own = await checkDirectory(fsys, dir, euid);
    if (typeof own === 'object') return readOnly(own.readOnly);
    for (const name of await fsys.list(dir)) {
      const file = path.join(dir, name);
      checkOwner(await fsys.stat(file), file, 'state file', euid);
    }
    const journalInfo = await fsys.stat(journalPath);
    checkKind(journalInfo, journalPath, 'journal', 'file');
    checkPrivate(journalInfo, journalPath, 'journal');
    const keyInfo = await fsys.stat(path.join(dir, KEY_FILE));
    checkKind(keyInfo, path.join(dir, KEY_FILE), 'server key file', 'file');
    checkPrivate(keyInfo, path.join(dir, KEY_FILE), 'server key file');
    const bytes = await fsys.read(journalPath);
    const decoded = loadJournal(bytes ?? Buffer.alloc(0), journalPath, root, options.interfaceName);
    const state: SavedState = replay(decoded.records);
    if (state.boot !== null && state.boot.interfaceName !== options.interfaceName) {
      throw new StateDirError(
        `journal ${journalPath} describes interface ${state.boot.interfaceName}, not ` +
          `${options.interfaceName}; nothing was changed. Give each interface its own ` +
          `directory (DIR/<interface>/), or move the journal aside`,
      );
    }
    const journal = new Journal(fsys, journalPath, state, decoded.seq);
    try {
      await journal.open();
    } catch (error) {
      if (error instanceof UnsafeFileError) throw new StateDirError(error.message);
      throw error;
    }
    return new StateStore(fsys, root, options.interfaceName, journal, decoded.tornTail);
  }

  /**
   * Why the state directory takes no writes (its file system is read-only: EROFS), or null.
   * Read-only, the saved state is loaded and every record rejects (StateReadOnlyError).
   */
  get readOnly(): string | null {
    return this.journal.readOnly;
  }

  /** Why changes cannot be saved until the journal is rewritten (retried on the next one), or null. */
  get broken(): string | null {
    const broken = this.journal.brokenBy;
    if (broken === null) return null;
    return broken instanceof Error ? broken.message : String(broken);
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

  /**
   * Saves the key of an interface the daemon is about to create, with its settings; read-only,
   * it refuses (StateReadOnlyError) before the interface exists.
   */
  async saveInterface(privateKey: Buffer, iface: SavedInterface): Promise<void> {
    // Read-only: an interface whose key cannot be saved would come back with another one.
    if (this.readOnly !== null) throw new StateReadOnlyError(this.dir, this.readOnly);
    await replaceFile(
      this.fsys,
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
        ...(p.presharedKey === undefined ? {} : { presharedKey: p.presharedKey }),
        ...(p.name === undefined ? {} : { name: p.name }),
        ...(p.expiresAt === undefined ? {} : { expiresAt: p.expiresAt }),
      })),
    );
  }

  abortCreates(publicKeys: readonly string[]): Promise<void> {
    return this.journal.append(...publicKeys.map((k) => ({ t: 'abort' as const, k })));
  }

  /** A delete, before its kernel change: a tombstone until `settleDelete` (a restart finishes it). */
  recordDelete(publicKey: string): Promise<void> {
    return this.journal.append({ t: 'del', k: publicKey });
  }

  /** A peer the kernel already lost (removed behind the daemon's back): nothing left to finish. */
  recordGone(publicKey: string): Promise<void> {
    return this.journal.append({ t: 'del', k: publicKey, done: true });
  }

  /** The kernel side of the peer's delete has ended: its tombstone goes (memory only). */
  settleDelete(publicKey: string): void {
    this.journal.state.tombstones?.delete(publicKey);
  }

  recordLimit(publicKey: string, bytesPerSecond: number | null): Promise<void> {
    return this.journal.append({ t: 'limit', k: publicKey, bps: bytesPerSecond });
  }

  recordCap(publicKey: string, cap: SavedCap | null): Promise<void> {
    return this.journal.append({ t: 'cap', k: publicKey, cap });
  }

  /** The peer's expiry (issue 31, ms since the epoch); null clears it. */
  recordExpiry(publicKey: string, expiresAt: number | null): Promise<void> {
    return this.journal.append({ t: 'exp', k: publicKey, x: expiresAt });
  }

  /** The peer's name (issue 31); null clears it. */
  recordName(publicKey: string, name: string | null): Promise<void> {
    return this.journal.append({ t: 'name', k: publicKey, n: name });
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

  /**
   * Puts the peer back in memory as it was (`peer`, or absent) when the record undoing a refused
   * change could not be written; the journal rewrites itself from memory before its next write
   * (Journal.amend).
   */
  amendPeer(publicKey: string, peer: SavedPeer | undefined): void {
    this.journal.amend(
      peer === undefined ? { t: 'del', k: publicKey, done: true } : peerRecord(peer),
    );
  }

  /** Puts peers back as whole records (adopted peers, a compensation after a failed change). */
  recordPeers(peers: readonly SavedPeer[]): Promise<void> {
    return this.journal.append(...peers.map(peerRecord));
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

  get outboxPath(): string {
    return path.join(this.dir, this.interfaceName, OUTBOX_FILE);
  }

  /**
   * The webhook outbox beside the journal (outbox.ts): its pending deliveries loaded, the file
   * rewritten compacted. A symbolic link or a file others may read refuses (StateDirError).
   */
  async openOutbox(): Promise<OutboxOpened> {
    try {
      return await Outbox.open(this.fsys, this.outboxPath);
    } catch (error) {
      if (error instanceof OutboxFileError || error instanceof UnsafeFileError) {
        throw new StateDirError(error.message);
      }
      throw error;
    }
  }

  close(): Promise<void> {
    return this.journal.close();
  }
}

export { JOURNAL_MODE };
