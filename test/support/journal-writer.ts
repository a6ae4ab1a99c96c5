/**
 * A process that writes to a state directory as fast as it can, for the kill -9 test
 * (test/unit/state/crash.test.ts): `node journal-writer.js DIR` creates peers with limits and
 * caps, 8 writes in flight, and prints `ack <publicKey> <limit>` once each write has resolved
 * (is on disk), until it is killed.
 */
import { StateStore } from '../../src/state';

async function main(): Promise<void> {
  const store = await StateStore.open({ dir: process.argv[2]!, interfaceName: 'wg0' });
  let n = 0;
  const worker = async (): Promise<never> => {
    for (;;) {
      const i = n++;
      const key = Buffer.alloc(32);
      key.writeUInt32BE(i, 0);
      const publicKey = key.toString('base64');
      await store.commitCreates([{ publicKey, allowedIps: [`10.8.${i >> 8}.${i & 0xff}/32`] }]);
      await store.recordLimit(publicKey, 1000 + i);
      await store.checkpointUsage(new Map([[publicKey, i]]));
      process.stdout.write(`ack ${publicKey} ${1000 + i}\n`);
    }
  };
  await Promise.all(Array.from({ length: 8 }, worker));
}

void main();
