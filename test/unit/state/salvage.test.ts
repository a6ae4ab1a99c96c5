/**
 * `wg-peerd state salvage` (issue 28): the way out of a journal damaged before its last batch.
 * It keeps the valid prefix, sets the rest aside beside the journal, never brings back a deleted
 * peer, and says in one line what it kept and dropped; the start then loads the result.
 */
import { expect } from 'chai';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import {
  StateDirError,
  StateStore,
  decodeJournal,
  encodeRecord,
  journalLines,
  runStateCommand,
  type JournalRecord,
} from '../../../src/state';
import { helpText } from '../../../src/config';
import { MemoryFs } from '../../support/memory-fs';

const DIR = '/var/lib/wg-peerd';
const JOURNAL = `${DIR}/wg0/journal`;
const NOW = new Date('2026-11-28T18:30:05.123Z');
const DROPPED = `${JOURNAL}.dropped-20261128T183005Z`;

function key(i: number): string {
  const bytes = Buffer.alloc(32);
  bytes.writeUInt32BE(i, 0);
  return bytes.toString('base64');
}

function open(fs: MemoryFs): Promise<StateStore> {
  return StateStore.open({ dir: DIR, interfaceName: 'wg0', fs });
}

/** Peers 0..3 created with limits, peer 1 deleted later; a bit flipped in peer 2's limit. */
async function damaged(): Promise<{ fs: MemoryFs; offset: number; bytes: Buffer }> {
  const fs = new MemoryFs();
  const store = await open(fs);
  for (let i = 0; i < 4; i++) {
    await store.commitCreates([{ publicKey: key(i), allowedIps: [`10.8.0.${i + 2}/32`] }]);
  }
  for (let i = 0; i < 4; i++) await store.recordLimit(key(i), 1000 + i);
  await store.recordDelete(key(1));
  await store.recordLimit(key(3), 7);
  await store.close();
  const bytes = Buffer.from(fs.files.get(JOURNAL)!.data);
  const target = journalLines(bytes).find((l) => l.value?.t === 'limit' && l.value.k === key(2))!;
  bytes[target.start + 30] ^= 0x04;
  fs.put(JOURNAL, bytes);
  // The batch of the damaged line starts after the previous marker: that is where the prefix ends.
  const before = journalLines(bytes).filter(
    (l) => l.end <= target.start && l.value?.t === 'commit',
  );
  return { fs, offset: before.at(-1)!.end, bytes };
}

async function salvage(fs: MemoryFs, ...argv: string[]) {
  const out: string[] = [];
  const err: string[] = [];
  const status = await runStateCommand(argv, {
    out: (line) => out.push(line),
    err: (line) => err.push(line),
    fs,
    now: () => NOW,
  });
  return { status, out, err };
}

describe('state/salvage: wg-peerd state salvage (issue 28)', () => {
  it('keeps the valid prefix, sets the rest aside beside the journal, and says so in one line', async () => {
    const { fs, offset, bytes } = await damaged();
    const { status, out, err } = await salvage(fs, 'salvage', '--state-dir', DIR);
    expect(status).to.equal(0);
    expect(err).to.deep.equal([]);
    expect(out).to.have.length(1);
    expect(out[0]).to.contain(`salvaged ${JOURNAL}`).and.contain(`byte offset ${offset}`);
    expect(out[0])
      .to.contain(`dropped ${bytes.length - offset} bytes`)
      .and.contain(DROPPED);
    expect(fs.files.get(DROPPED)?.data.equals(bytes.subarray(offset))).to.equal(true);
    expect(fs.files.get(DROPPED)?.mode).to.equal(0o600);
    // The start loads it: the prefix holds the four creates and the limits of peers 0 and 1.
    const store = await open(fs);
    expect(store.state.peers.get(key(0))?.limit).to.equal(1000);
    expect(store.state.peers.get(key(2))?.limit).to.equal(null); // its limit was the damage
    expect(store.state.peers.get(key(3))?.limit).to.equal(null); // after it: dropped
  });

  it('never brings back a peer deleted after the damage: every later deletion whose checksum holds is applied', async () => {
    const { fs } = await damaged();
    const { out } = await salvage(fs, 'salvage', '--state-dir', DIR, '--interface', 'wg0');
    expect(out[0]).to.contain('applied 1 deletions');
    const store = await open(fs);
    expect(store.state.peers.has(key(1))).to.equal(false);
    expect([...store.state.peers.keys()].sort()).to.deep.equal([key(0), key(2), key(3)].sort());
  });

  it('salvages a journal of the old format: its good lines up to the first bad one', async () => {
    const fs = new MemoryFs();
    const records: JournalRecord[] = [
      { t: 'peer', k: key(0), ips: ['10.8.0.2/32'], limit: null, cap: null },
      { t: 'peer', k: key(1), ips: ['10.8.0.3/32'], limit: null, cap: null },
      { t: 'del', k: key(0) },
    ];
    const lines = records.map(encodeRecord);
    fs.put(JOURNAL, lines[0]! + lines[1]!.replace('10.8.0.3', '10.8.0.9') + lines[2]!);
    try {
      await open(fs);
      expect.fail('the start was not refused');
    } catch (error) {
      expect(error).to.be.instanceOf(StateDirError);
    }
    const { status } = await salvage(fs, 'salvage', '--state-dir', DIR);
    expect(status).to.equal(0);
    const store = await open(fs);
    expect(store.state.peers.size).to.equal(0); // peer 0 deleted after the damage, 1 damaged
    expect(fs.text(DROPPED)).to.equal(lines[1]!.replace('10.8.0.3', '10.8.0.9') + lines[2]!);
  });

  it('leaves a journal that loads as it is, torn tail and all, and says so', async () => {
    const fs = new MemoryFs();
    const store = await open(fs);
    await store.commitCreates([{ publicKey: key(0), allowedIps: ['10.8.0.2/32'] }]);
    const before = `${fs.text(JOURNAL)}torn`;
    fs.put(JOURNAL, before);
    const { status, out } = await salvage(fs, 'salvage', '--state-dir', DIR);
    expect(status).to.equal(0);
    expect(out[0]).to.contain('nothing to salvage').and.contain('4 bytes');
    expect(fs.text(JOURNAL)).to.equal(before);
    expect([...fs.files.keys()].some((f) => f.includes('dropped'))).to.equal(false);
  });

  it('refuses, in one line and with status 2, a command line it does not know or a directory another user owns', async () => {
    const { fs } = await damaged();
    for (const argv of [
      [],
      ['salvage'],
      ['repair', '--state-dir', DIR],
      ['salvage', '--state-dir', DIR, '--bogus'],
      ['salvage', '--state-dir', DIR, '--interface', '../x'],
    ]) {
      const { status, err } = await salvage(fs, ...argv);
      expect(status, argv.join(' ')).to.equal(2);
      expect(err).to.have.length(1);
      expect(err[0]).to.contain('usage: wg-peerd state salvage --state-dir DIR');
    }
    fs.owners.set(`${DIR}/wg0`, 0);
    const { status, err } = await salvage(fs, 'salvage', '--state-dir', DIR);
    expect(status).to.equal(2);
    expect(err[0]).to.contain("run the salvage as wg-peerd's user");
    expect(decodeJournal.bind(null, fs.files.get(JOURNAL)!.data)).to.throw();
  });

  it('is named in --help', () => {
    expect(helpText()).to.contain('wg-peerd state salvage --state-dir DIR [--interface NAME]');
  });

  it('runs as `wg-peerd state salvage` from the command line, on a real directory', async () => {
    const root = mkdtempSync(path.join(tmpdir(), 'wg-peerd-salvage-'));
    try {
      const store = await StateStore.open({ dir: root, interfaceName: 'wg0' });
      await store.commitCreates([{ publicKey: key(0), allowedIps: ['10.8.0.2/32'] }]);
      await store.commitCreates([{ publicKey: key(1), allowedIps: ['10.8.0.3/32'] }]);
      await store.close();
      const journal = path.join(root, 'wg0', 'journal');
      const bytes = readFileSync(journal);
      const target = journalLines(bytes).find(
        (l) => l.value?.t === 'peer' && l.value.k === key(0),
      )!;
      bytes[target.start + 12] ^= 0x01;
      writeFileSync(journal, bytes);
      const main = path.join(__dirname, '..', '..', '..', 'src', 'main.js');
      const run = spawnSync(process.execPath, [main, 'state', 'salvage', '--state-dir', root], {
        encoding: 'utf8',
      });
      expect(run.status, run.stderr).to.equal(0);
      expect(run.stdout.trim().split('\n')).to.have.length(1);
      expect(run.stdout).to.contain('salvaged');
      expect(
        readdirSync(path.join(root, 'wg0')).some((f) => f.startsWith('journal.dropped-')),
      ).to.equal(true);
      const after = await StateStore.open({ dir: root, interfaceName: 'wg0' });
      expect(after.state.peers.size).to.equal(0);
      await after.close();
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });
});
