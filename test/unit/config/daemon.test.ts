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
      // The scrape comes within the list's freshness window (1 s by default): one kernel read
      // serves both (DESIGN §5), counted once by the observer and once by the fake kernel.
      expect(res.body).to.match(/^wg_peerd_kernel_read_duration_seconds_count\{result="ok"\} 1$/m);
      expect(kernel.count('getDevice') - dumpsAtStart).to.equal(1);
      expect(res.body).to.match(/^wg_peerd_peers\{status="never"\} 1$/m);
      // --metrics-per-peer false reaches the app: no per-peer series.
      expect(res.body).to.not.match(/^wg_peerd_peer_/m);
    } finally {
      await daemon.shutdown();
    }
  });

  it('finishes a request in flight, refuses new connections, then closes the kernel', async () => {
    const kernel = FakeKernel.withInterface();
    const log = captureLog();
    const daemon = await startDaemon(config(), {
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
