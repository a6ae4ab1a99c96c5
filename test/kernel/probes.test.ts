import { expect } from 'chai';
import { type DaemonProcess, api, startDaemon } from './support/daemon';
import { SERVER_UNDERLAY_IP, assertInTestVm, removeDaemonLeftovers, sh } from './support/topology';

const IFNAME = 'wgpr0';
const LISTEN = '127.0.0.1:18095';
const TOKEN = 'probes-admin-token-0123456789';

// Issue 9: /readyz asks the real kernel (link, the "wireguard" genl family, an RTM_GETQDISC
// dump, NFT_MSG_GETGEN) and needs no token, although the daemon has one.
describe('probes: /healthz and /readyz on the real kernel (npm start)', function () {
  let daemon: DaemonProcess | undefined;

  before(function () {
    assertInTestVm();
    removeDaemonLeftovers(IFNAME);
  });

  after(async function () {
    await daemon?.stop();
    removeDaemonLeftovers(IFNAME);
  });

  it('is ready on a working interface, and 503 INTERFACE_MISSING once it is deleted', async () => {
    daemon = await startDaemon({
      args: ['--interface', IFNAME, '--listen', LISTEN, '--endpoint-host', SERVER_UNDERLAY_IP],
      env: { WG_PEERD_TOKEN: TOKEN },
      listen: LISTEN,
      token: TOKEN,
    });
    const health = await api(daemon, 'GET', '/healthz');
    expect(health.status).to.equal(200);
    expect(health.body).to.deep.equal({ success: true, status: 'ok' });

    const ready = await api(daemon, 'GET', '/readyz');
    expect(ready.status).to.equal(200);
    expect(ready.body).to.deep.equal({
      success: true,
      status: 'ready',
      checks: { interface: 'ok', wireguard: 'ok', tc: 'ok', nftables: 'ok' },
    });

    sh(`ip link del ${IFNAME}`);
    const gone = await api(daemon, 'GET', '/readyz');
    expect(gone.status).to.equal(503);
    expect(gone.body).to.include({ success: false, code: 'INTERFACE_MISSING' });
    const checks = gone.body.checks as Record<string, string>;
    expect(checks.interface).to.contain(`Interface ${IFNAME} does not exist`);
    expect(checks).to.include({ wireguard: 'ok', tc: 'ok', nftables: 'ok' });
    // The process itself still answers.
    expect((await api(daemon, 'GET', '/healthz')).status).to.equal(200);
  });
});
