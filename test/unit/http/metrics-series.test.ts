/**
 * How many series GET /metrics exports per peer (issue 32): counted on the rendered text of a
 * peer that has everything (a handshake, an IPv6 address, a speed limit, a data cap with a
 * billing period that has reset) and of a bare peer, with and without `--metrics-per-peer
 * false`, and held equal to what the README and `--help` say, so the figure an operator sizes
 * Prometheus by is the true one.
 */
import { expect } from 'chai';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { OPTIONS } from '../../../src/config';
import { renderPeerMetrics } from '../../../src/http/metrics';
import type { WireGuardPeer } from '../../../src/kernel/types';
import type { PeerSnapshot } from '../../../src/peers';
import { parseSamples } from '../../support/prom-text';
import { NOW, key } from './helpers';

const ROOT = path.resolve(__dirname, '../../../..');

const FULL = key(1);
const BARE = key(2);

function snapshot(): PeerSnapshot {
  const peers: WireGuardPeer[] = [
    {
      publicKey: FULL,
      endpoint: '192.0.2.7:51820',
      lastHandshake: new Date(NOW - 1000),
      rxBytes: 10,
      txBytes: 20,
      persistentKeepalive: 0,
      allowedIps: [
        { family: 4, address: '10.8.0.2', cidr: 32 },
        { family: 6, address: 'fd42::2', cidr: 128 },
      ],
    },
    {
      publicKey: BARE,
      endpoint: null,
      lastHandshake: null,
      rxBytes: 0,
      txBytes: 0,
      persistentKeepalive: 0,
      allowedIps: [{ family: 4, address: '10.8.0.3', cidr: 32 }],
    },
  ];
  return {
    takenAt: NOW,
    readMs: 1,
    device: { name: 'wg0', ifindex: 3, publicKey: null, listenPort: 51820, fwmark: 0, peers },
    limits: new Map([['10.8.0.2', { download: 1000, upload: 2000 }]]),
    caps: new Map([
      [
        '10.8.0.2',
        {
          quotaBytes: 5000,
          usedBytes: 100,
          enforced: true,
          throttleBytesPerSecond: 500,
          throttled: false,
          plan: {
            period: 'month' as const,
            periodStart: { at: NOW - 86_400_000 * 40, offsetMinutes: 0 },
            periodFrom: NOW - 86_400_000 * 10,
            previousUsedBytes: 4000,
          },
        },
      ],
    ]),
    suspended: new Map(),
  };
}

async function seriesPerPeer(perPeer: boolean): Promise<{ full: number; bare: number }> {
  const text = Buffer.concat(await renderPeerMetrics(snapshot(), perPeer)).toString('utf8');
  const samples = parseSamples(text);
  const of = (publicKey: string) => samples.filter((s) => s.labels.public_key === publicKey);
  return { full: of(FULL).length, bare: of(BARE).length };
}

describe('metrics: series per peer, as the README and --help say (issue 32)', () => {
  it('exports 16 series for a peer with everything and 4 for a bare peer', async () => {
    expect(await seriesPerPeer(true)).to.deep.equal({ full: 16, bare: 4 });
  });

  it('exports none per peer with --metrics-per-peer false', async () => {
    expect(await seriesPerPeer(false)).to.deep.equal({ full: 0, bare: 0 });
  });

  it("says in the README and in the flag's help the count it exports, and what a 50,000-peer host should choose", async () => {
    const { full } = await seriesPerPeer(true);
    const stated = (text: string): number => {
      const match = /up to (\d+) series per peer/.exec(text);
      expect(match, text.slice(0, 80)).to.not.equal(null);
      return Number(match![1]);
    };
    const readme = readFileSync(path.join(ROOT, 'README.md'), 'utf8');
    expect(stated(readme)).to.equal(full);
    expect(stated(OPTIONS.metricsPerPeer.meaning)).to.equal(full);
    // The README's breakdown adds up to it: every peer, handshake, dual stack, limit, cap.
    const parts =
      /(\d+) for every peer .*?, (\d+) more once .*?, (\d+) more for a dual-stack peer, (\d+) more\s+with a speed limit and (\d+) more with a data cap/s.exec(
        readme,
      );
    expect(parts).to.not.equal(null);
    expect(parts!.slice(1).reduce((sum, n) => sum + Number(n), 0)).to.equal(full);
    expect(Number(parts![1])).to.equal((await seriesPerPeer(true)).bare);
    expect(readme).to.match(/50,000 peers[^.]*`--metrics-per-peer false`/);
    expect(readme).to.not.match(/eight per peer/);
    expect(OPTIONS.metricsPerPeer.meaning).to.match(/false above 10,000 peers/);
  });
});
