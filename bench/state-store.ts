/**
 * The state directory's two candidate stores, side by side at 50,000 peers (issue 16 asks to
 * measure both and choose): the journal of src/state (CRC-framed lines, group commit,
 * compaction by atomic replace) and SQLite in WAL mode through better-sqlite3 12 (synchronous=FULL,
 * so a commit is on disk like a journal flush). Both on the same real filesystem.
 *
 *   node dist/bench/state-store.js [--peers N] [--dir DIR]
 *
 * better-sqlite3 is not a dependency of wg-peerd (it would be a second native addon to ship
 * prebuilt): install it anywhere (`npm install --prefix /tmp/sqlbench better-sqlite3@12`) and
 * point BENCH_SQLITE at that node_modules/better-sqlite3; without it only the journal runs.
 * Prints one table: each workload's milliseconds (median of 3) for each store.
 */
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { StateStore } from '../src/state';

interface SqliteStatement {
  run(...params: unknown[]): unknown;
  all(...params: unknown[]): unknown[];
}
interface SqliteDatabase {
  pragma(text: string): unknown;
  exec(sql: string): void;
  prepare(sql: string): SqliteStatement;
  transaction<A extends unknown[]>(fn: (...args: A) => void): (...args: A) => void;
  close(): void;
}
type SqliteConstructor = new (file: string) => SqliteDatabase;

const { values } = parseArgs({
  options: {
    peers: { type: 'string', default: '50000' },
    dir: { type: 'string', default: '/var/tmp' },
  },
});
const PEERS = Number(values.peers);
const ROUNDS = 3;

function key(i: number): string {
  const b = Buffer.alloc(32);
  b.writeUInt32BE(i, 0);
  return b.toString('base64');
}
function ip(i: number): string {
  return `10.${(i >> 16) & 0xff}.${(i >> 8) & 0xff}.${(i & 0xff) + 1}/32`;
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

async function timed(fn: () => Promise<void> | void): Promise<number> {
  const t = performance.now();
  await fn();
  return performance.now() - t;
}

async function journalRound(dir: string): Promise<Record<string, number>> {
  const r: Record<string, number> = {};
  let store = await StateStore.open({ dir, interfaceName: 'wg0' });
  r['write 50k peers with caps'] = await timed(async () => {
    await store.recordPeers(
      Array.from({ length: PEERS }, (_, i) => ({
        publicKey: key(i),
        allowedIps: [ip(i)],
        limit: 125000,
        cap: { quotaBytes: 1e10, usedBytes: 0 },
      })),
    );
  });
  r['checkpoint: every counter changed'] = await timed(async () => {
    await store.checkpointUsage(new Map(Array.from({ length: PEERS }, (_, i) => [key(i), i + 1])));
  });
  r['checkpoint: 1% changed'] = await timed(async () => {
    await store.checkpointUsage(
      new Map(Array.from({ length: PEERS / 100 }, (_, i) => [key(i * 100), i + 7])),
    );
  });
  r['one durable write'] = await timed(() => store.recordLimit(key(1), 5000));
  r['50 concurrent durable writes'] = await timed(async () => {
    await Promise.all(Array.from({ length: 50 }, (_, i) => store.recordLimit(key(i), 6000 + i)));
  });
  await store.close();
  r['open and load at start'] = await timed(async () => {
    store = await StateStore.open({ dir, interfaceName: 'wg0' });
  });
  r['bytes on disk'] = statSync(path.join(dir, 'wg0', 'journal')).size;
  await store.close();
  return r;
}

function sqliteRound(Database: SqliteConstructor, dir: string): Record<string, number> {
  const r: Record<string, number> = {};
  const file = path.join(dir, 'state.db');
  let db = new Database(file);
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = FULL');
  db.exec(
    'CREATE TABLE peers (k TEXT PRIMARY KEY, ips TEXT, lim INTEGER, quota INTEGER, used INTEGER)',
  );
  const insert = db.prepare('INSERT INTO peers VALUES (?, ?, ?, ?, ?)');
  const usage = db.prepare('UPDATE peers SET used = ? WHERE k = ?');
  const limit = db.prepare('UPDATE peers SET lim = ? WHERE k = ?');
  r['write 50k peers with caps'] = performance.now();
  db.transaction(() => {
    for (let i = 0; i < PEERS; i++) insert.run(key(i), ip(i), 125000, 1e10, 0);
  })();
  r['write 50k peers with caps'] = performance.now() - r['write 50k peers with caps'];
  let t = performance.now();
  db.transaction(() => {
    for (let i = 0; i < PEERS; i++) usage.run(i + 1, key(i));
  })();
  r['checkpoint: every counter changed'] = performance.now() - t;
  t = performance.now();
  db.transaction(() => {
    for (let i = 0; i < PEERS / 100; i++) usage.run(i + 7, key(i * 100));
  })();
  r['checkpoint: 1% changed'] = performance.now() - t;
  t = performance.now();
  limit.run(5000, key(1));
  r['one durable write'] = performance.now() - t;
  // better-sqlite3 is synchronous: 50 requests in flight commit one after the other.
  t = performance.now();
  for (let i = 0; i < 50; i++) limit.run(6000 + i, key(i));
  r['50 concurrent durable writes'] = performance.now() - t;
  db.close();
  t = performance.now();
  db = new Database(file);
  db.prepare('SELECT * FROM peers').all();
  r['open and load at start'] = performance.now() - t;
  db.close();
  r['bytes on disk'] =
    statSync(file).size + (statSync(`${file}-wal`, { throwIfNoEntry: false })?.size ?? 0);
  return r;
}

async function main(): Promise<void> {
  const rows = new Map<string, { journal: number[]; sqlite: number[] }>();
  const add = (store: 'journal' | 'sqlite', r: Record<string, number>): void => {
    for (const [k, v] of Object.entries(r)) {
      const row = rows.get(k) ?? { journal: [], sqlite: [] };
      row[store].push(v);
      rows.set(k, row);
    }
  };
  let Database: SqliteConstructor | null = null;
  if (process.env['BENCH_SQLITE']) {
    Database = (await import(process.env['BENCH_SQLITE'])).default as SqliteConstructor;
  }
  for (let round = 0; round < ROUNDS; round++) {
    const a = mkdtempSync(path.join(values.dir, 'bench-journal-'));
    add('journal', await journalRound(a));
    rmSync(a, { recursive: true, force: true });
    if (Database) {
      const b = mkdtempSync(path.join(values.dir, 'bench-sqlite-'));
      add('sqlite', sqliteRound(Database, b));
      rmSync(b, { recursive: true, force: true });
    }
  }
  console.log(`state stores at ${PEERS} peers, ${values.dir}, median of ${ROUNDS} (ms; bytes)`);
  console.log('| workload | journal | SQLite WAL (better-sqlite3) |');
  console.log('| --- | --- | --- |');
  for (const [k, row] of rows) {
    const f = (xs: number[]): string =>
      xs.length ? median(xs).toFixed(k.startsWith('bytes') ? 0 : 1) : 'not run';
    console.log(`| ${k} | ${f(row.journal)} | ${f(row.sqlite)} |`);
  }
}

void main();
