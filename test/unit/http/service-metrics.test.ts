import { expect } from 'chai';
import { Registry } from 'prom-client';
import { TunnelTotals, registerServiceMetrics } from '../../../src/http/service-metrics';
import type { WireGuardPeer } from '../../../src/kernel/types';
import type { PeerSnapshot, Readiness, ReadinessApi } from '../../../src/peers';
import { parseSamples, valueOf, type Sample } from '../../support/prom-text';

function peer(publicKey: string, rxBytes: number, txBytes: number): WireGuardPeer {
  return {
    publicKey,
    endpoint: null,
    lastHandshake: null,
    rxBytes,
    txBytes,
    persistentKeepalive: 0,
    allowedIps: [],
  };
}

function snapshot(peers: WireGuardPeer[], listenPort = 51820): PeerSnapshot {
  return {
    takenAt: 0,
    readMs: 1,
    device: { name: 'wg0', ifindex: 7, publicKey: null, listenPort, fwmark: 0, peers },
    limits: new Map(),
    caps: new Map(),
  };
}

async function samples(registry: Registry): Promise<Sample[]> {
  return parseSamples(await registry.metrics());
}

// Issue 21: the tunnel's bytes as a counter. Each read adds what every peer counted since the
// previous read; a deleted peer's bytes stay counted.
describe('tunnel byte totals', () => {
  it('start at the sum of the counters of the first read', () => {
    const totals = new TunnelTotals();
    totals.observe([peer('a', 100, 10), peer('b', 50, 5)]);
    expect([totals.rx, totals.tx]).to.deep.equal([150, 15]);
  });

  it('add each peer’s growth, and never fall when a peer is deleted', () => {
    const totals = new TunnelTotals();
    totals.observe([peer('a', 100, 10), peer('b', 50, 5)]);
    totals.observe([peer('a', 130, 12), peer('b', 60, 5)]);
    expect([totals.rx, totals.tx]).to.deep.equal([190, 17]);
    totals.observe([peer('a', 140, 12)]); // b deleted: its 60 bytes stay
    expect([totals.rx, totals.tx]).to.deep.equal([200, 17]);
  });

  it('add all of a new peer’s counter, and all of one that started again from 0', () => {
    const totals = new TunnelTotals();
    totals.observe([peer('a', 100, 10)]);
    totals.observe([peer('a', 100, 10), peer('c', 7, 3)]);
    expect([totals.rx, totals.tx]).to.deep.equal([107, 13]);
    // a removed and added again between two reads: its counters restarted below their last.
    totals.observe([peer('a', 40, 4), peer('c', 7, 3)]);
    expect([totals.rx, totals.tx]).to.deep.equal([147, 17]);
  });
});

describe('service metrics', () => {
  it('say the version and the Node.js version in wg_peerd_build_info', async () => {
    const registry = new Registry();
    registerServiceMetrics(registry, { version: '1.2.3', nodejsVersion: 'v20.1.0' });
    const found = await samples(registry);
    expect(
      valueOf(found, 'wg_peerd_build_info', { version: '1.2.3', nodejs_version: 'v20.1.0' }),
    ).to.equal(1);
  });

  it('give the interface’s peers, listen port and byte totals from the snapshot', async () => {
    const registry = new Registry();
    const metrics = registerServiceMetrics(registry, { version: '1' });
    const first = snapshot([peer('a', 100, 10), peer('b', 50, 5)], 51999);
    metrics.observe(first);
    metrics.observe(first); // a second scrape of the same read adds nothing
    let found = await samples(registry);
    const wg0 = { interface: 'wg0' };
    expect(valueOf(found, 'wg_peerd_interface_peers', wg0)).to.equal(2);
    expect(valueOf(found, 'wg_peerd_interface_listen_port', wg0)).to.equal(51999);
    expect(valueOf(found, 'wg_peerd_interface_receive_bytes_total', wg0)).to.equal(150);
    expect(valueOf(found, 'wg_peerd_interface_transmit_bytes_total', wg0)).to.equal(15);

    metrics.observe(snapshot([peer('a', 110, 20)], 51999));
    found = await samples(registry);
    expect(valueOf(found, 'wg_peerd_interface_peers', wg0)).to.equal(1);
    expect(valueOf(found, 'wg_peerd_interface_receive_bytes_total', wg0)).to.equal(160);
    expect(valueOf(found, 'wg_peerd_interface_transmit_bytes_total', wg0)).to.equal(25);
  });

  it('drop the interface gauges while the kernel read fails, keeping the byte totals', async () => {
    const registry = new Registry();
    const metrics = registerServiceMetrics(registry, { version: '1' });
    metrics.observe(snapshot([peer('a', 100, 10)]));
    metrics.observe(null);
    const found = await samples(registry);
    const names = new Set(found.map((s) => s.name));
    expect(names.has('wg_peerd_interface_peers')).to.equal(false);
    expect(names.has('wg_peerd_interface_listen_port')).to.equal(false);
    expect(valueOf(found, 'wg_peerd_interface_receive_bytes_total', { interface: 'wg0' })).to.equal(
      100,
    );
  });

  it('ask readiness at each scrape: wg_peerd_ready and one series per check', async () => {
    let answer: Readiness = {
      ready: true,
      checks: { interface: 'ok', wireguard: 'ok', tc: 'ok', nftables: 'ok' },
      error: null,
    };
    let asked = 0;
    const readiness: ReadinessApi = {
      check: async () => {
        asked += 1;
        return answer;
      },
    };
    const registry = new Registry();
    registerServiceMetrics(registry, { version: '1', readiness });
    let found = await samples(registry);
    expect(valueOf(found, 'wg_peerd_ready', {})).to.equal(1);
    expect(valueOf(found, 'wg_peerd_readiness_check', { check: 'tc' })).to.equal(1);
    answer = {
      ready: false,
      checks: {
        interface: 'The WireGuard interface wg0 does not exist',
        wireguard: 'ok',
        tc: 'ok',
        nftables: 'ok',
      },
      error: new Error('The WireGuard interface wg0 does not exist'),
    };
    found = await samples(registry);
    expect(asked).to.equal(2);
    expect(valueOf(found, 'wg_peerd_ready', {})).to.equal(0);
    expect(valueOf(found, 'wg_peerd_readiness_check', { check: 'interface' })).to.equal(0);
    expect(valueOf(found, 'wg_peerd_readiness_check', { check: 'nftables' })).to.equal(1);
  });
});
