/**
 * What the daemon does with the journal's edges (issue 28), end to end on the in-memory kernel
 * and a real directory: a torn last batch is dropped with one warn line and counted on /metrics;
 * damage before it refuses the start in one line that names the offset and the salvage command;
 * and, over the in-memory file system, a read-only state directory answers changes with 507 and
 * makes /readyz say why.
 */
import { expect } from 'chai';
import { appendFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { EXIT_CONFIG, StartupError, startDaemon } from '../../../src/main';
import { PeerService, ReadinessCheck, StateWriteError } from '../../../src/peers';
import { StateStore, journalLines } from '../../../src/state';
import { MemoryFs } from '../../support/memory-fs';
import { httpCall } from '../../support/http-call';
import { FakeKernel } from '../support/fake-kernel';
import { testConfig } from '../support/config';
import { captureLog } from '../support/log-capture';

describe('daemon with a journal a crash or a disk left behind (issue 28)', () => {
  let dir: string;
  beforeEach(() => {
    dir = mkdtempSync(path.join(tmpdir(), 'wg-peerd-journal-'));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  async function journalWithPeers(): Promise<string> {
    const store = await StateStore.open({ dir, interfaceName: 'wg0' });
    await store.commitCreates([{ publicKey: 'a'.repeat(43) + '=', allowedIps: ['10.8.0.2/32'] }]);
    await store.commitCreates([{ publicKey: 'b'.repeat(43) + '=', allowedIps: ['10.8.0.3/32'] }]);
    await store.close();
    return path.join(dir, 'wg0', 'journal');
  }

  it('drops a torn last batch with one warn line (bytes, records) and counts it on /metrics', async () => {
    const journal = await journalWithPeers();
    appendFileSync(journal, Buffer.alloc(300)); // a batch the power cut left as zeros
    const log = captureLog();
    const daemon = await startDaemon(testConfig({ stateDir: dir }), {
      openKernel: async () => new FakeKernel(),
      logger: log.logger,
      readBootId: async () => 'boot-1',
    });
    try {
      const torn = log.lines().filter((line) => line['event'] === 'state_torn_tail');
      expect(torn).to.have.length(1);
      expect(torn[0]).to.include({ level: 40, bytes: 300, records: 0 }); // pino's warn
      expect(String(torn[0]!['msg'])).to.contain('dropped 300 bytes, 0 records');
      const metrics = (await httpCall(daemon.address.port, 'GET', '/metrics')).text;
      expect(metrics).to.match(/^wg_peerd_state_torn_tail_bytes_total 300$/m);
    } finally {
      await daemon.shutdown();
    }
  });

  it('refuses damage before the last batch with exit 2 and one line: the offset and the salvage command', async () => {
    const journal = await journalWithPeers();
    const bytes = readFileSync(journal);
    const first = journalLines(bytes).find((line) => line.value?.t === 'peer')!;
    bytes[first.start + 15] ^= 0x02;
    writeFileSync(journal, bytes);
    let failure: unknown;
    await startDaemon(testConfig({ stateDir: dir }), {
      openKernel: async () => new FakeKernel(),
      logger: captureLog().logger,
      readBootId: async () => 'boot-1',
    }).catch((error: unknown) => (failure = error));
    expect(failure).to.be.instanceOf(StartupError);
    expect((failure as StartupError).exitStatus).to.equal(EXIT_CONFIG);
    const message = (failure as Error).message;
    expect(message).to.contain(`byte offset ${first.start}`);
    expect(message).to.contain(`wg-peerd state salvage --state-dir ${dir} --interface wg0`);
    expect(message).not.to.contain('journal.prev').and.not.contain('\n');
  });

  it('answers a change with 507 naming the read-only state directory when its file system is read-only', async () => {
    const fs = new MemoryFs();
    fs.readOnly = true;
    const store = await StateStore.open({ dir: '/var/lib/wg-peerd', interfaceName: 'wg0', fs });
    const service = new PeerService({
      kernel: FakeKernel.withInterface(),
      interfaceName: 'wg0',
      endpointHost: 'vpn.example.net',
      logger: captureLog().logger,
      journal: store,
    });
    let failure: unknown;
    await service.createPeer().catch((error: unknown) => (failure = error));
    expect(failure).to.be.instanceOf(StateWriteError);
    expect((failure as StateWriteError).category).to.equal('storage'); // 507
    expect((failure as Error).message).to.contain('/var/lib/wg-peerd is read-only');
  });

  it('is not ready on /readyz while the state directory is read-only, and says why', async () => {
    const fs = new MemoryFs();
    fs.readOnly = true;
    const store = await StateStore.open({ dir: '/var/lib/wg-peerd', interfaceName: 'wg0', fs });
    const kernel = FakeKernel.withInterface();
    const readiness = new ReadinessCheck(
      kernel,
      'wg0',
      () => false,
      () => store.readOnly,
    );
    const answer = await readiness.check();
    expect(answer.ready).to.equal(false);
    expect(answer.checks).to.deep.equal({
      interface: 'ok',
      wireguard: 'ok',
      tc: 'ok',
      nftables: 'ok',
    });
    expect(answer.error).to.include({ code: 'STATE_READ_ONLY', category: 'unavailable' });
    expect(answer.error?.message).to.contain('read-only').and.contain('EROFS');
    const writable = new ReadinessCheck(
      kernel,
      'wg0',
      () => false,
      () => null,
    );
    expect((await writable.check()).ready).to.equal(true);
  });
});
