/**
 * `wg-peerd state salvage --state-dir DIR [--interface NAME]`: what an operator runs when the
 * start refused a journal damaged before its last batch (issue 28). It keeps the journal's valid
 * prefix, sets every byte after it aside in a file beside the journal
 * (`journal.dropped-<UTC time>`, mode 0600), never brings back a deleted peer, writes the result
 * as a new journal generation, and says in one line what it kept and dropped.
 *
 * The exact rule: (1) kept are the records of the journal's whole batches from its start up to
 * the first line that is damaged or does not close its batch (a journal of the old format, lines
 * without commit markers: its good lines up to the first bad one); (2) of everything after that
 * point, only the lines whose checksum holds and that remove something are applied, in file
 * order: deletions (`del`: a peer deleted after the damage stays deleted) and aborted creates
 * (`abort`); every other record after the damage is dropped (it may have been acknowledged: a
 * limit, cap or create after the damage is lost, and the kernel's copy is what the next start
 * finds). The dropped bytes are in the file beside it, for a person to read.
 *
 * A journal that loads (whole, or with a torn last batch the start drops itself) is left as it
 * is. It checks what the start checks (owner, modes): run it as wg-peerd's user, daemon stopped.
 * Exit status: 0 salvaged or nothing to do, 2 for a command line or a directory it cannot use.
 */
import path from 'node:path';
import { parseArgs } from 'node:util';
import { type StateFs, nodeStateFs, replaceFile } from './files';
import { JOURNAL_MODE } from './journal';
import {
  JournalCorruptError,
  applyRecord,
  compactRecords,
  decodeJournal,
  encodeBatch,
  replay,
  validPrefix,
} from './records';
import { JOURNAL_FILE } from './store';

export interface SalvageOptions {
  dir: string;
  interfaceName: string;
  fs?: StateFs;
  /** The clock of the dropped file's name. */
  now?: () => Date;
}

export interface SalvageResult {
  journal: string;
  /** False: the journal loads as it is; nothing was changed. */
  salvaged: boolean;
  keptRecords: number;
  keptBytes: number;
  /** Deletions and aborted creates found after the damage and applied. */
  removals: number;
  peers: number;
  /** Where the damage starts, and what was set aside from there. */
  offset: number;
  droppedBytes: number;
  droppedFile: string | null;
  /** The one line the command prints. */
  message: string;
}

export class SalvageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'SalvageError';
  }
}

function stamp(date: Date): string {
  return date
    .toISOString()
    .replace(/[-:]/g, '')
    .replace(/\.\d+Z$/, 'Z');
}

async function checkOwned(fsys: StateFs, file: string): Promise<void> {
  const info = await fsys.stat(file);
  if (info === null) return;
  if (info.kind === 'symlink') throw new SalvageError(`${file} is a symbolic link; move it aside`);
  if (info.uid !== fsys.euid()) {
    throw new SalvageError(
      `${file} is owned by uid ${info.uid}, not by this user (uid ${fsys.euid()}): run the ` +
        "salvage as wg-peerd's user, so that what it writes stays the daemon's",
    );
  }
}

export async function salvageJournal(options: SalvageOptions): Promise<SalvageResult> {
  const fsys = options.fs ?? nodeStateFs;
  const dir = path.join(path.resolve(options.dir), options.interfaceName);
  const journal = path.join(dir, JOURNAL_FILE);
  await checkOwned(fsys, dir);
  await checkOwned(fsys, journal);
  const bytes = await fsys.read(journal);
  if (bytes === null) throw new SalvageError(`there is no journal at ${journal}`);
  try {
    const decoded = decodeJournal(bytes);
    const torn = decoded.tornTail;
    return {
      journal,
      salvaged: false,
      keptRecords: decoded.records.length,
      keptBytes: decoded.goodLength,
      removals: 0,
      peers: replay(decoded.records).peers.size,
      offset: decoded.goodLength,
      droppedBytes: 0,
      droppedFile: null,
      message:
        `nothing to salvage: ${journal} loads as it is` +
        (torn === null
          ? ''
          : ` (the start drops its torn last batch itself: ${torn.bytes} bytes, never acknowledged)`),
    };
  } catch (error) {
    if (!(error instanceof JournalCorruptError)) throw error;
  }
  const prefix = validPrefix(bytes);
  const state = replay(prefix.records);
  let removals = 0;
  for (const line of prefix.lines.slice(prefix.next)) {
    const value = line.value;
    if (line.fault === null && value !== null && (value.t === 'del' || value.t === 'abort')) {
      applyRecord(state, value);
      removals++;
    }
  }
  const droppedFile = `${journal}.dropped-${stamp((options.now ?? (() => new Date()))())}`;
  const dropped = bytes.subarray(prefix.length);
  // What is set aside is on disk before the journal no longer holds it.
  const file = await fsys.create(droppedFile, JOURNAL_MODE);
  try {
    await file.write(dropped);
    await file.sync();
  } finally {
    await file.close();
  }
  await fsys.syncDir(dir);
  await replaceFile(fsys, journal, encodeBatch(compactRecords(state), 0), JOURNAL_MODE);
  return {
    journal,
    salvaged: true,
    keptRecords: prefix.records.length,
    keptBytes: prefix.length,
    removals,
    peers: state.peers.size,
    offset: prefix.length,
    droppedBytes: dropped.length,
    droppedFile,
    message:
      `salvaged ${journal}: kept ${prefix.records.length} records (${prefix.length} bytes, ` +
      `${state.peers.size} peers), applied ${removals} deletions found after the damage; ` +
      `dropped ${dropped.length} bytes from byte offset ${prefix.length}, set aside in ${droppedFile}`,
  };
}

const USAGE = 'usage: wg-peerd state salvage --state-dir DIR [--interface NAME]';

/**
 * `wg-peerd state ...` with `argv` after `state`: prints one line (`out` on success, `err`
 * otherwise) and returns the exit status.
 */
export async function runStateCommand(
  argv: readonly string[],
  io: { out: (line: string) => void; err: (line: string) => void; fs?: StateFs; now?: () => Date },
): Promise<number> {
  let dir: string;
  let interfaceName: string;
  try {
    const { values, positionals } = parseArgs({
      args: [...argv],
      options: { 'state-dir': { type: 'string' }, interface: { type: 'string' } },
      allowPositionals: true,
      strict: true,
    });
    if (positionals.length !== 1 || positionals[0] !== 'salvage') {
      throw new SalvageError(`unknown state command ${positionals.join(' ') || '(none)'}`);
    }
    if (values['state-dir'] === undefined || values['state-dir'] === '') {
      throw new SalvageError('--state-dir DIR is needed');
    }
    dir = values['state-dir'];
    interfaceName = values.interface ?? 'wg0';
    if (!/^[^/\s]{1,15}$/.test(interfaceName) || interfaceName === '.' || interfaceName === '..') {
      throw new SalvageError(`--interface ${interfaceName} is no interface name`);
    }
  } catch (error) {
    io.err(`wg-peerd state: ${(error as Error).message}; ${USAGE}`);
    return 2;
  }
  try {
    const result = await salvageJournal({
      dir,
      interfaceName,
      ...(io.fs ? { fs: io.fs } : {}),
      ...(io.now ? { now: io.now } : {}),
    });
    io.out(result.message);
    return 0;
  } catch (error) {
    io.err(`wg-peerd state salvage: ${(error as Error).message}`);
    return 2;
  }
}
