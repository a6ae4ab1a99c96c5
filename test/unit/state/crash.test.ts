/**
 * kill -9 at any instant loses nothing that was acknowledged: a real process writes to a real
 * state directory, is killed with SIGKILL after a random number of acknowledged writes, and the
 * journal it leaves is read back. (A power cut is the reboot test in the VM.)
 */
import { expect } from 'chai';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { StateStore } from '../../../src/state';

const WRITER = path.join(__dirname, '..', '..', 'support', 'journal-writer.js');

function killedAfter(dir: string, acks: number): Promise<Map<string, number>> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [WRITER, dir], { stdio: ['ignore', 'pipe', 'inherit'] });
    const acked = new Map<string, number>();
    let buffered = '';
    child.stdout.setEncoding('utf8');
    child.stdout.on('data', (chunk: string) => {
      buffered += chunk;
      const lines = buffered.split('\n');
      buffered = lines.pop()!;
      for (const line of lines) {
        const [, key, limit] = line.split(' ');
        acked.set(key!, Number(limit));
      }
      if (acked.size >= acks) child.kill('SIGKILL');
    });
    child.on('error', reject);
    child.on('exit', (_code, signal) => {
      if (signal !== 'SIGKILL') reject(new Error(`the writer ended by itself (${signal})`));
      else resolve(acked);
    });
  });
}

describe('state: kill -9 at any instant (issue 16)', function () {
  this.timeout(60_000);

  for (const acks of [1, 17, 60, 150, 400]) {
    it(`keeps every write acknowledged before a SIGKILL (after ${acks} acknowledgements)`, async () => {
      const dir = mkdtempSync(path.join(tmpdir(), 'wg-peerd-crash-'));
      try {
        const acked = await killedAfter(dir, acks);
        expect(acked.size).to.be.at.least(acks);
        const store = await StateStore.open({ dir, interfaceName: 'wg0' });
        for (const [publicKey, limit] of acked) {
          expect(store.state.peers.get(publicKey)?.limit, publicKey).to.equal(limit);
        }
        expect(store.state.intents.size).to.equal(0);
        await store.close();
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });
  }
});
