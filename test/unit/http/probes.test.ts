/**
 * GET /healthz and GET /readyz (issue 9) over the fake kernel: no token, nothing about peers,
 * never a WireGuard dump, and a 503 that names each missing piece with the code every other
 * route gives for it (SPEC/DESIGN §3 envelope plus `checks`).
 */
import { expect } from 'chai';
import request from 'supertest';
import { FacilityUnavailableError } from '../../../src/kernel/errors';
import { TokenStore } from '../../../src/http';
import { createApp } from '../../../src/http/app';
import { PeerService, ReadinessCheck } from '../../../src/peers';
import { FakeKernel, netlinkError } from '../support/fake-kernel';
import { captureLog } from '../support/log-capture';

const ADMIN = 'a'.repeat(32);

function probeApp(kernel: FakeKernel) {
  const log = captureLog();
  const service = new PeerService({
    kernel,
    interfaceName: 'wg0',
    endpointHost: 'vpn.example.net',
    logger: log.logger,
  });
  // Tokens are configured: the probes must still need none.
  const tokens = new TokenStore({ admin: [ADMIN], read: [] });
  const readiness = new ReadinessCheck(kernel, 'wg0');
  return request(createApp({ service, tokens, logger: log.logger, readiness }));
}

const ALL_OK = { interface: 'ok', wireguard: 'ok', tc: 'ok', nftables: 'ok' };

describe('probes: GET /healthz', () => {
  it('answers 200 without a token and without asking the kernel', async () => {
    const kernel = FakeKernel.withInterface();
    const res = await probeApp(kernel).get('/healthz');
    expect(res.status).to.equal(200);
    expect(res.body).to.deep.equal({ success: true, status: 'ok' });
    expect(kernel.calls).to.deep.equal([]);
  });

  it('answers even with the interface gone (the process lives)', async () => {
    const kernel = new FakeKernel();
    const res = await probeApp(kernel).get('/healthz');
    expect(res.status).to.equal(200);
  });

  it('keeps the API itself behind the token', async () => {
    const res = await probeApp(FakeKernel.withInterface()).get('/api/peers');
    expect(res.status).to.equal(401);
  });
});

describe('probes: GET /readyz', () => {
  it('answers 200 with every check ok, without a token, peers or a WireGuard dump', async () => {
    const kernel = FakeKernel.withInterface();
    await kernel.wireguard.addPeers('wg0', [
      {
        publicKey: Buffer.alloc(32, 7).toString('base64'),
        allowedIps: [{ family: 4, address: '10.8.0.2', cidr: 32 }],
      },
    ]);
    kernel.calls.length = 0;
    const res = await probeApp(kernel).get('/readyz');
    expect(res.status).to.equal(200);
    expect(res.body).to.deep.equal({ success: true, status: 'ready', checks: ALL_OK });
    expect(kernel.count('getDevice')).to.equal(0);
    expect(kernel.calls.map((c) => c.method).sort()).to.deep.equal([
      'getLink',
      'probe.genlFamily',
      'probe.nftGeneration',
      'probe.qdiscCount',
    ]);
    expect(JSON.stringify(res.body)).not.to.contain('10.8.0.2');
  });

  it('answers 503 INTERFACE_MISSING when the interface is gone, the rest still checked', async () => {
    const kernel = new FakeKernel();
    const res = await probeApp(kernel).get('/readyz');
    expect(res.status).to.equal(503);
    expect(res.body).to.include({ success: false, code: 'INTERFACE_MISSING' });
    expect(res.body.error).to.contain('Interface wg0 does not exist');
    expect(res.body.checks).to.deep.equal({ ...ALL_OK, interface: res.body.error });
  });

  it('answers 503 INTERFACE_NOT_WIREGUARD for a link of another kind', async () => {
    const kernel = FakeKernel.withInterface();
    kernel.links.get('wg0')!.info.kind = 'dummy';
    const res = await probeApp(kernel).get('/readyz');
    expect(res.status).to.equal(503);
    expect(res.body).to.include({ code: 'INTERFACE_NOT_WIREGUARD' });
    expect(res.body.checks.interface).to.contain('it is of kind dummy');
    expect(res.body.checks.wireguard).to.equal('ok');
  });

  it('names WireGuard when its generic netlink family is not registered', async () => {
    const kernel = FakeKernel.withInterface();
    kernel.genlFamilies.delete('wireguard');
    const res = await probeApp(kernel).get('/readyz');
    expect(res.status).to.equal(503);
    expect(res.body).to.include({ code: 'FACILITY_MISSING' });
    expect(res.body.checks).to.include({ interface: 'ok', tc: 'ok', nftables: 'ok' });
    expect(res.body.checks.wireguard).to.contain('WireGuard').and.contain('ENOENT');
  });

  it('names tc when the qdisc dump is refused', async () => {
    const kernel = FakeKernel.withInterface();
    // What the probe's boundary makes of an EOPNOTSUPP answer to the qdisc dump.
    kernel.fail(
      'probe.qdiscCount',
      new FacilityUnavailableError(
        'traffic control (rtnetlink tc: EOPNOTSUPP)',
        'load the kernel modules: modprobe sch_htb cls_u32 act_mirred ifb',
      ),
    );
    const res = await probeApp(kernel).get('/readyz');
    expect(res.status).to.equal(503);
    expect(res.body).to.include({ code: 'FACILITY_MISSING' });
    expect(res.body.checks).to.include({ interface: 'ok', wireguard: 'ok', nftables: 'ok' });
    expect(res.body.checks.tc).to.contain('traffic control').and.contain('EOPNOTSUPP');
  });

  it('names nf_tables when nfnetlink is missing', async () => {
    const kernel = FakeKernel.withInterface();
    kernel.fail(
      'probe.nftGeneration',
      new FacilityUnavailableError(
        'nfnetlink (NETLINK_NETFILTER sockets)',
        'load the kernel modules: modprobe nfnetlink nf_tables',
      ),
    );
    const res = await probeApp(kernel).get('/readyz');
    expect(res.status).to.equal(503);
    expect(res.body).to.include({ code: 'FACILITY_MISSING' });
    expect(res.body.checks).to.include({ interface: 'ok', wireguard: 'ok', tc: 'ok' });
    expect(res.body.checks.nftables).to.contain('modprobe nfnetlink nf_tables');
  });

  it('names every missing piece at once, the envelope giving the first', async () => {
    const kernel = new FakeKernel();
    kernel.genlFamilies.delete('wireguard');
    // What the probe's boundary makes of an EOPNOTSUPP answer to the qdisc dump.
    kernel.fail(
      'probe.qdiscCount',
      new FacilityUnavailableError(
        'traffic control (rtnetlink tc: EOPNOTSUPP)',
        'load the kernel modules: modprobe sch_htb cls_u32 act_mirred ifb',
      ),
    );
    kernel.fail('probe.nftGeneration', netlinkError('EPROTONOSUPPORT', 'NFT_MSG_GETGEN'));
    const res = await probeApp(kernel).get('/readyz');
    expect(res.status).to.equal(503);
    expect(res.body.code).to.equal('INTERFACE_MISSING');
    for (const name of ['interface', 'wireguard', 'tc', 'nftables']) {
      expect(res.body.checks[name], name).to.not.equal('ok');
    }
  });

  it('is ready again once the interface is back', async () => {
    const kernel = new FakeKernel();
    const app = probeApp(kernel);
    expect((await app.get('/readyz')).status).to.equal(503);
    kernel.addInterface();
    const res = await app.get('/readyz');
    expect(res.status).to.equal(200);
    expect(res.body.checks).to.deep.equal(ALL_OK);
  });
});
