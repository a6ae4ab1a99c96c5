import { expect } from 'chai';
import http from 'node:http';
import {
  EXIT_CONFIG,
  EXIT_FAILURE,
  StartupError,
  startDaemon,
  type Daemon,
} from '../../../src/main';
import { FakeKernel, kernelFailure } from '../support/fake-kernel';
import { testConfig } from '../support/config';
import { captureLog } from '../support/log-capture';

const config = testConfig;

/** One request on its own connection (no keep-alive pool between tests). */
function get(daemon: Daemon, path: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.get(
      { host: '127.0.0.1', port: daemon.address.port, path, agent: false },
      (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => (body += chunk));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      },
    );
    req.on('error', reject);
  });
}

async function startupError(promise: Promise<unknown>): Promise<StartupError> {
  try {
    await promise;
  } catch (error) {
    expect(error).to.be.instanceOf(StartupError);
    return error as StartupError;
  }
  throw new Error('expected the start to fail');
}

describe('daemon start and shutdown', () => {
  it('creates the missing interface, says so, and serves the API', async () => {
    const kernel = new FakeKernel();
    const log = captureLog();
    const daemon = await startDaemon(config(), {
      openKernel: async () => kernel,
      logger: log.logger,
    });
    try {
      expect(kernel.links.get('wg0')?.info.kind).to.equal('wireguard');
      expect(log.lines().some((l) => l['event'] === 'interface_created')).to.equal(true);
      const res = await get(daemon, '/api/peers');
      expect(res.status).to.equal(200);
      expect(JSON.parse(res.body)).to.deep.equal({
        success: true,
        peers: [],
        total_count: 0,
        filter: null,
      });
    } finally {
      await daemon.shutdown();
    }
  });

  it('serves /metrics, counting the reads of the list through the service observer', async () => {
    const kernel = FakeKernel.withInterface();
    kernel.putPeer(Buffer.alloc(32, 5).toString('base64'), ['10.8.0.5/32']);
    const daemon = await startDaemon(config({ metricsPerPeer: false }), {
      openKernel: async () => kernel,
      logger: captureLog().logger,
    });
    try {
      const dumpsAtStart = kernel.count('getDevice');
      expect((await get(daemon, '/api/peers')).status).to.equal(200);
      const res = await get(daemon, '/metrics');
      expect(res.status).to.equal(200);
      // The list and the scrape come within the freshness window (1 s by default) of the
      // start's own read: that one read serves both (DESIGN §5, issue 29), counted once by the
      // observer, and the fake kernel dumped the device for neither.
      expect(res.body).to.match(/^wg_peerd_kernel_read_duration_seconds_count\{result="ok"\} 1$/m);
      expect(kernel.count('getDevice') - dumpsAtStart).to.equal(0);
      expect(res.body).to.match(/^wg_peerd_peers\{status="never"\} 1$/m);
      // --metrics-per-peer false reaches the app: no per-peer series.
      expect(res.body).to.not.match(/^wg_peerd_peer_/m);
    } finally {
      await daemon.shutdown();
    }
  });

  it('answers the first list after a start on an existing capped interface from one kernel read (issue 29)', async () => {
    const kernel = FakeKernel.withInterface();
    const caps = new Map([
      [
        '10.8.0.5',
        { quotaBytes: 5_000, usedBytes: 700, publicKey: Buffer.alloc(32, 5).toString('base64') },
      ],
      [
        '10.8.0.6',
        {
          quotaBytes: 6_000,
          usedBytes: 0,
          publicKey: Buffer.alloc(32, 6).toString('base64'),
          // A billing period: the start used to read the caps and the device for it alone.
          plan: {
            period: 'month' as const,
            periodStart: { at: Date.parse('2026-01-01T00:00:00Z'), offsetMinutes: 0 },
            periodFrom: Date.now() - 1000,
            previousUsedBytes: null,
          },
        },
      ],
    ]);
    kernel.caps.set('wg0', caps);
    for (const [address, cap] of caps) kernel.putPeer(cap.publicKey, [`${address}/32`]);
    const daemon = await startDaemon(config({ listMaxAgeMs: 60_000 }), {
      openKernel: async () => kernel,
      logger: captureLog().logger,
    });
    try {
      const res = await get(daemon, '/api/peers');
      expect(res.status).to.equal(200);
      const listed = (JSON.parse(res.body) as { peers: { data_cap: { used_bytes: number } }[] })
        .peers;
      expect(listed.map((p) => p.data_cap.used_bytes)).to.have.members([700, 0]);
      // Up to that answer: the interface phase's device read (its key and port), then one read
      // of everything the list shows; no caps dump of the start's own before it.
      const reads = kernel.calls
        .map((c) => c.method)
        .filter((m) => /^getDevice$|\.list(Caps|Limits|Suspended)$/.test(m));
      expect(reads).to.deep.equal([
        'getDevice',
        'getDevice',
        'shaper.listLimits',
        'quota.listCaps',
        'suspension.listSuspended',
      ]);
    } finally {
      await daemon.shutdown();
    }
  });

  it('finishes a request in flight, refuses new connections, then closes the kernel', async () => {
    const kernel = FakeKernel.withInterface();
    const log = captureLog();
    // Window 0: the list reads the kernel itself, not the start's read (issue 29).
    const daemon = await startDaemon(config({ listMaxAgeMs: 0 }), {
      openKernel: async () => kernel,
      logger: log.logger,
    });
    const dumpsAtStart = kernel.count('getDevice');
    const release = kernel.hold('getDevice');
    const inFlight = get(daemon, '/api/peers');
    // Wait until the request is inside its kernel dump.
    while (kernel.count('getDevice') === dumpsAtStart) {
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    const stopped = daemon.shutdown();
    // No longer accepting.
    let refused = false;
    await get(daemon, '/api/peers').catch(() => (refused = true));
    expect(refused).to.equal(true);
    expect(kernel.closed).to.equal(false);
    release();
    expect((await inFlight).status).to.equal(200);
    await stopped;
    expect(kernel.closed).to.equal(true);
    expect(log.lines().some((l) => l['msg'] === 'stopped')).to.equal(true);
  });

  it('refuses an interface of another kind with the configuration exit status', async () => {
    const kernel = new FakeKernel();
    kernel.addOtherLink('wg0', 'bridge');
    const error = await startupError(
      startDaemon(config(), { openKernel: async () => kernel, logger: captureLog().logger }),
    );
    expect(error.exitStatus).to.equal(EXIT_CONFIG);
    expect(error.message).to.contain('wg0').and.contain('not a WireGuard interface');
    expect(kernel.closed).to.equal(true);
  });

  it('fails with status 1 when the kernel cannot be opened or refuses to create the interface', async () => {
    const noSockets = await startupError(
      startDaemon(config(), {
        openKernel: async () => {
          throw kernelFailure('EPROTONOSUPPORT', 'socket NETLINK_GENERIC');
        },
        logger: captureLog().logger,
      }),
    );
    expect(noSockets.exitStatus).to.equal(EXIT_FAILURE);
    const kernel = new FakeKernel();
    kernel.fail('createWireGuard', kernelFailure('EPERM', 'RTM_NEWLINK wg0'));
    const denied = await startupError(
      startDaemon(config(), { openKernel: async () => kernel, logger: captureLog().logger }),
    );
    expect(denied.exitStatus).to.equal(EXIT_FAILURE);
    expect(denied.message).to.contain('CAP_NET_ADMIN');
  });

  it('fails with status 1 when the listen address is taken', async () => {
    const first = await startDaemon(config(), {
      openKernel: async () => FakeKernel.withInterface(),
      logger: captureLog().logger,
    });
    try {
      const kernel = FakeKernel.withInterface();
      const error = await startupError(
        startDaemon(config({ listen: { host: '127.0.0.1', port: first.address.port } }), {
          openKernel: async () => kernel,
          logger: captureLog().logger,
        }),
      );
      expect(error.exitStatus).to.equal(EXIT_FAILURE);
      expect(error.message).to.contain('EADDRINUSE');
      expect(kernel.closed).to.equal(true);
    } finally {
      await first.shutdown();
    }
  });
});
