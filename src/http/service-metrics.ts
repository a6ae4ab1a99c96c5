/**
 * The service-level series of GET /metrics (issue 21), beside the per-peer ones: what the
 * Prometheus rules and the Grafana dashboard of contrib/ are written against.
 *
 * - `wg_peerd_build_info{version, nodejs_version}`: always 1, so a dashboard can show (and an
 *   alert can compare) what runs where.
 * - Interface series from the same shared kernel read as the peers (no read of their own):
 *   `wg_peerd_interface_peers`, `wg_peerd_interface_listen_port`, and the tunnel's bytes,
 *   `wg_peerd_interface_receive_bytes_total` / `_transmit_bytes_total`, labelled `interface`.
 *   The byte totals are the sum of the peers' WireGuard counters, kept from falling when a peer
 *   goes: a plain sum drops by a peer's bytes when it is deleted, which rate() would read as a
 *   counter reset, i.e. a spike of the whole remaining traffic. So each read adds the growth of
 *   every peer since the previous read (a peer new to the read, or whose counter fell because it
 *   was removed and added again, adds its whole counter); bytes a deleted peer moved after the
 *   last read before its deletion are not counted. They are there without the per-peer series
 *   too (`--metrics-per-peer false`).
 * - Readiness, asked at each scrape (cheap reads, src/peers/readiness.ts):
 *   `wg_peerd_ready` (what /readyz answers: 1 ready, 0 not) and `wg_peerd_readiness_check{check}`
 *   per check (interface, wireguard, tc, nftables), so an alert needs no blackbox probe.
 */
import { Counter, Gauge, type Registry } from 'prom-client';
import { OK, type PeerSnapshot, type Readiness, type ReadinessApi } from '../peers';

export interface ServiceMetricsOptions {
  /** The daemon's version (package.json). */
  version: string;
  /** `process.version` unless a test says otherwise. */
  nodejsVersion?: string;
  /** Behind wg_peerd_ready; without it those series are absent. */
  readiness?: ReadinessApi | null;
}

export interface ServiceMetrics {
  /** Give it every snapshot a scrape is answered from (null: the read failed). */
  observe(snapshot: PeerSnapshot | null): void;
}

/** What the previous read counted for one peer, and which read that was. */
interface PeerBytes {
  rx: number;
  tx: number;
  read: number;
}

/**
 * The tunnel's byte totals: the peers' counters summed, never falling (see the file's comment).
 * The table is updated in place (50,000 peers: one lookup each, no allocation but for new peers).
 */
export class TunnelTotals {
  rx = 0;
  tx = 0;
  private readonly last = new Map<string, PeerBytes>();
  private reads = 0;

  /** Adds what the peers of `snapshot` counted since the previous call. */
  observe(peers: ReadonlyArray<{ publicKey: string; rxBytes: number; txBytes: number }>): void {
    const read = ++this.reads;
    for (const peer of peers) {
      const before = this.last.get(peer.publicKey);
      if (before === undefined) {
        this.rx += peer.rxBytes;
        this.tx += peer.txBytes;
        this.last.set(peer.publicKey, { rx: peer.rxBytes, tx: peer.txBytes, read });
        continue;
      }
      this.rx += growth(before.rx, peer.rxBytes);
      this.tx += growth(before.tx, peer.txBytes);
      before.rx = peer.rxBytes;
      before.tx = peer.txBytes;
      before.read = read;
    }
    // Peers gone since: forgotten, their bytes stay in the totals.
    if (this.last.size > peers.length) {
      for (const [key, bytes] of this.last) if (bytes.read !== read) this.last.delete(key);
    }
  }
}

/** A counter's growth since `before`; all of it when it started again from 0. */
function growth(before: number, now: number): number {
  return now < before ? now : now - before;
}

/**
 * Registers the series; `options` null (tests of other parts) leaves out build info and
 * readiness, and keeps the interface series.
 */
export function registerServiceMetrics(
  registry: Registry,
  options: ServiceMetricsOptions | null,
): ServiceMetrics {
  if (options !== null) {
    new Gauge({
      name: 'wg_peerd_build_info',
      help: 'Always 1; the labels say which wg-peerd (version) runs on which Node.js (nodejs_version)',
      labelNames: ['version', 'nodejs_version'] as const,
      registers: [registry],
    }).set(
      { version: options.version, nodejs_version: options.nodejsVersion ?? process.version },
      1,
    );
  }

  const peers = new Gauge({
    name: 'wg_peerd_interface_peers',
    help: 'Peers on the WireGuard interface, whatever their status',
    labelNames: ['interface'] as const,
    registers: [registry],
  });
  const listenPort = new Gauge({
    name: 'wg_peerd_interface_listen_port',
    help: 'UDP port the WireGuard interface listens on',
    labelNames: ['interface'] as const,
    registers: [registry],
  });
  const receive = new Counter({
    name: 'wg_peerd_interface_receive_bytes_total',
    help: "Bytes received from the interface's peers, as WireGuard counts them per peer, including peers since removed (up to the last read before their removal)",
    labelNames: ['interface'] as const,
    registers: [registry],
  });
  const transmit = new Counter({
    name: 'wg_peerd_interface_transmit_bytes_total',
    help: "Bytes sent to the interface's peers, as WireGuard counts them per peer, including peers since removed (up to the last read before their removal)",
    labelNames: ['interface'] as const,
    registers: [registry],
  });

  const readiness = options?.readiness ?? null;
  if (readiness !== null) {
    // Asked once per scrape, as /readyz would be: both gauges' collect() run together (the
    // registry collects every metric at once) and share the one answer in flight.
    let asking: Promise<Readiness | null> | null = null;
    const ask = (): Promise<Readiness | null> => {
      asking ??= readiness
        .check()
        .catch(() => null) // cannot happen (check() settles every check); counts as not ready
        .finally(() => {
          asking = null;
        });
      return asking;
    };
    new Gauge({
      name: 'wg_peerd_ready',
      help: '1 when the daemon is ready (GET /readyz answers 200), else 0; wg_peerd_readiness_check says which check failed',
      registers: [registry],
      async collect() {
        this.set((await ask())?.ready === true ? 1 : 0);
      },
    });
    new Gauge({
      name: 'wg_peerd_readiness_check',
      help: '1 when the check of /readyz passes (interface: it exists and is WireGuard; wireguard, tc, nftables: the kernel facility answers), else 0',
      labelNames: ['check'] as const,
      registers: [registry],
      async collect() {
        const result = await ask();
        this.reset();
        if (result === null) return;
        for (const [check, outcome] of Object.entries(result.checks)) {
          this.set({ check }, outcome === OK ? 1 : 0);
        }
      },
    });
  }

  // One observation per snapshot, in the order scrapes get them (scrapes share snapshots).
  let lastSeen: PeerSnapshot | null = null;
  let totals: { name: string; counts: TunnelTotals } | null = null;
  return {
    observe(snapshot) {
      if (snapshot === null) {
        // No read: nothing to say about the interface now. The byte totals stay as counted.
        peers.reset();
        listenPort.reset();
        return;
      }
      if (snapshot === lastSeen) return;
      lastSeen = snapshot;
      const { device } = snapshot;
      const list = device.peers;
      const labels = { interface: device.name };
      peers.reset();
      listenPort.reset();
      peers.set(labels, list.length);
      listenPort.set(labels, device.listenPort);
      // Another interface name (none in one daemon's life, but the counters must not mix).
      if (totals === null || totals.name !== device.name) {
        totals = { name: device.name, counts: new TunnelTotals() };
      }
      const before = { rx: totals.counts.rx, tx: totals.counts.tx };
      totals.counts.observe(list);
      receive.inc(labels, totals.counts.rx - before.rx);
      transmit.inc(labels, totals.counts.tx - before.tx);
    },
  };
}
