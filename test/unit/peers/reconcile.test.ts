import { expect } from 'chai';
import type { KernelDataCap } from '../../../src/kernel/types';
import { PeerService } from '../../../src/peers/service';
import { FakeKernel } from '../support/fake-kernel';
import { captureLog } from '../support/log-capture';
import { listPeers } from '../../support/peer-list';

// Issue 10: the list shows the truth between writes, the next write repairs through the kernel
// layer's reconciliation with the live peers, and every loss and repair is logged at warn.
// The FakeKernel implements the ShaperApi/QuotaApi contract in memory.
const NOW = Date.parse('2026-03-01T12:00:00.000Z');
const key = (n: number): string => Buffer.alloc(32, n).toString('base64');

function setup() {
  const kernel = FakeKernel.withInterface();
  kernel.putPeer(key(1), ['10.8.0.2/32']);
  kernel.putPeer(key(2), ['10.8.0.3/32']);
  const log = captureLog();
  const svc = new PeerService({
    kernel,
    interfaceName: 'wg0',
    endpointHost: 'vpn.example',
    logger: log.logger,
    now: () => NOW,
  });
  const warnings = (event: string) =>
    log.lines().filter((line) => line.event === event && line.level === 40 /* pino's warn */);
  return { kernel, svc, log, warnings };
}

describe('peers/service: losses behind the daemon back, and their repair', () => {
  it('lists a limit that lost its upload as download-only, logs it once, and repairs it on the next write', async () => {
    const { kernel, svc, warnings } = setup();
    await svc.setSpeedLimit(key(1), 11_111);
    kernel.loseLimitDirection('10.8.0.2', 'upload');

    const [first] = await listPeers(svc, null);
    expect(first).to.include({ speedLimitBytesPerSecond: 11_111, speedLimitHolds: 'download' });
    await listPeers(svc, null);
    expect(warnings('kernel_state_lost')).to.have.length(1);

    await svc.setDataCap(key(2), 5_000); // any write
    const [after] = await listPeers(svc, null);
    expect(after).to.include({ speedLimitBytesPerSecond: 11_111, speedLimitHolds: 'both' });
    const repaired = warnings('kernel_repaired');
    expect(repaired.map((line) => [line.facility, line.address])).to.deep.include([
      'shaper',
      '10.8.0.2',
    ]);
  });

  it('passes the live peers to the shaper, which drops limits of addresses no peer has', async () => {
    const { kernel, svc, warnings } = setup();
    await svc.setSpeedLimit(key(1), 11_111);
    kernel.limits.get('wg0')!.set('10.8.0.9', { bytesPerSecond: 11_111, publicKey: key(9) });
    await svc.setSpeedLimit(key(2), 22_222);
    const ensure = kernel.calls.filter((c) => c.method === 'shaper.ensure').at(-1)!;
    expect((ensure.args[1] as Array<{ address: string }>).map((p) => p.address)).to.deep.equal([
      '10.8.0.2',
      '10.8.0.3',
    ]);
    expect([...kernel.limits.get('wg0')!.keys()].sort()).to.deep.equal(['10.8.0.2', '10.8.0.3']);
    expect(warnings('kernel_repaired').map((line) => line.address)).to.include('10.8.0.9');
  });

  it('lists caps lost with the nft table as not enforced with the values last seen, and restores them on the next write', async () => {
    const { kernel, svc, warnings } = setup();
    await svc.setDataCap(key(1), 1_000_000);
    kernel.setUsed('10.8.0.2', 4096);
    await listPeers(svc, null); // the daemon sees 4096 used
    kernel.loseAllCaps();

    const [lost] = await listPeers(svc, null);
    expect(lost!.dataCap).to.deep.equal({
      quotaBytes: 1_000_000,
      usedBytes: 4096,
      enforced: false,
    });
    expect(warnings('kernel_state_lost')).to.have.length(1);

    await svc.removeSpeedLimit(key(2)); // any write
    expect(kernel.caps.get('wg0')!.get('10.8.0.2')).to.include({
      quotaBytes: 1_000_000,
      usedBytes: 4096,
      publicKey: key(1),
    });
    const [restored] = await listPeers(svc, null);
    expect(restored!.dataCap).to.deep.equal({
      quotaBytes: 1_000_000,
      usedBytes: 4096,
      enforced: true,
    });
    expect(warnings('kernel_repaired').map((line) => line.facility)).to.include('quota');
  });

  it('restores a lost cap with the usage of the last read, where the kernel handed out the same cap object while it did not move', async () => {
    const { kernel, svc } = setup();
    // As the quota facility does (src/kernel/quota/listing.ts): an unchanged cap is the object
    // of the read before.
    const handedOut = new Map<string, KernelDataCap>();
    const listCaps = kernel.quota.listCaps.bind(kernel.quota);
    kernel.quota.listCaps = async (ifname) => {
      const caps = await listCaps(ifname);
      for (const [address, cap] of caps) {
        const last = handedOut.get(address);
        if (last && JSON.stringify(last) === JSON.stringify(cap)) caps.set(address, last);
        else handedOut.set(address, cap);
      }
      return caps;
    };
    await svc.setDataCap(key(1), 1_000_000);
    kernel.setUsed('10.8.0.2', 4096);
    await listPeers(svc, null);
    await listPeers(svc, null); // the same object again
    kernel.setUsed('10.8.0.2', 8192);
    await listPeers(svc, null); // a new one
    await listPeers(svc, null); // and that one again
    kernel.loseAllCaps();

    const [lost] = await listPeers(svc, null);
    expect(lost!.dataCap).to.deep.equal({
      quotaBytes: 1_000_000,
      usedBytes: 8192,
      enforced: false,
    });
  });

  it('removes an upload-only limit left at an address before giving it to a new peer', async () => {
    const kernel = FakeKernel.withInterface();
    kernel.limits.set(
      'wg0',
      new Map([
        ['10.8.0.2', { bytesPerSecond: 11_111, publicKey: key(9), lost: 'download' as const }],
      ]),
    );
    const svc = new PeerService({
      kernel,
      interfaceName: 'wg0',
      endpointHost: 'vpn.example',
      logger: captureLog().logger,
      now: () => NOW,
    });
    const created = await svc.createPeer();
    expect(created.ip).to.equal('10.8.0.2');
    expect(kernel.limits.get('wg0')!.has('10.8.0.2')).to.equal(false);
  });

  it('forgets a cap it saw once its peer is gone: a new peer on the address shows none', async () => {
    const { kernel, svc } = setup();
    await svc.setDataCap(key(1), 1_000_000);
    await listPeers(svc, null);
    await svc.deletePeer(key(1));
    kernel.putPeer(key(7), ['10.8.0.2/32']);
    const entry = (await listPeers(svc, null)).find((e) => e.publicKey === key(7));
    expect(entry!.dataCap).to.equal(null);
  });
});
