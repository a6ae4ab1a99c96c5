import type { WireGuardDevice } from '../../src/kernel/types';

/**
 * Parses `wg show <if> dump` (wireguard-tools, src/show.c dump_print): tab-separated, the first
 * line is the interface (private key, public key, listen port, fwmark), each further line a peer
 * (public key, preshared key, endpoint, allowed ips, latest handshake, rx, tx, keepalive).
 * "(none)" and "off" mean absent; a handshake of 0 means never.
 */
export interface WgDumpInterface {
  privateKey: string;
  publicKey: string;
  listenPort: number;
  fwmark: number;
}

export interface WgDumpPeer {
  publicKey: string;
  presharedKey: string | null;
  endpoint: string | null;
  allowedIps: string[];
  /** Seconds since the epoch; 0 when never. */
  latestHandshake: number;
  rxBytes: number;
  txBytes: number;
  /** Seconds; 0 when off. */
  persistentKeepalive: number;
}

export interface WgDump {
  device: WgDumpInterface;
  peers: WgDumpPeer[];
}

const none = (field: string): string | null => (field === '(none)' ? null : field);

export function parseWgDump(text: string): WgDump {
  const [head, ...rest] = text.trim().split('\n');
  const [privateKey, publicKey, listenPort, fwmark] = head.split('\t');
  return {
    device: {
      privateKey,
      publicKey,
      listenPort: Number(listenPort),
      fwmark: fwmark === 'off' ? 0 : Number(fwmark),
    },
    peers: rest.map((line) => {
      const [key, psk, endpoint, allowed, handshake, rx, tx, keepalive] = line.split('\t');
      return {
        publicKey: key,
        presharedKey: none(psk),
        endpoint: none(endpoint),
        allowedIps: allowed === '(none)' ? [] : allowed.split(','),
        latestHandshake: Number(handshake),
        rxBytes: Number(rx),
        txBytes: Number(tx),
        persistentKeepalive: keepalive === 'off' ? 0 : Number(keepalive),
      };
    }),
  };
}

/** A device as our client reports it, reduced to the fields `wg show dump` also shows. */
export type ComparableDevice = Pick<
  WireGuardDevice,
  'publicKey' | 'listenPort' | 'fwmark' | 'peers'
>;

/**
 * Field-by-field differences between our reading of a device and the oracle's; empty when they
 * agree. Allowed IPs are compared as sets, peers by public key.
 */
export function diffDeviceAgainstDump(device: ComparableDevice, dump: WgDump): string[] {
  const problems: string[] = [];
  const check = (what: string, ours: unknown, theirs: unknown): void => {
    if (JSON.stringify(ours) !== JSON.stringify(theirs)) {
      problems.push(`${what}: ours ${JSON.stringify(ours)}, wg ${JSON.stringify(theirs)}`);
    }
  };
  check('public key', device.publicKey, dump.device.publicKey);
  check('listen port', device.listenPort, dump.device.listenPort);
  check('fwmark', device.fwmark, dump.device.fwmark);
  check(
    'peer keys',
    device.peers.map((p) => p.publicKey).sort(),
    dump.peers.map((p) => p.publicKey).sort(),
  );
  for (const theirs of dump.peers) {
    const ours = device.peers.find((p) => p.publicKey === theirs.publicKey);
    if (!ours) continue;
    const key = theirs.publicKey.slice(0, 8);
    check(`${key} endpoint`, ours.endpoint, theirs.endpoint);
    check(
      `${key} allowed ips`,
      ours.allowedIps.map((ip) => `${ip.address}/${ip.cidr}`).sort(),
      [...theirs.allowedIps].sort(),
    );
    check(
      `${key} handshake`,
      ours.lastHandshake === null ? 0 : Math.floor(ours.lastHandshake.getTime() / 1000),
      theirs.latestHandshake,
    );
    check(`${key} rx`, ours.rxBytes, theirs.rxBytes);
    check(`${key} tx`, ours.txBytes, theirs.txBytes);
    check(`${key} keepalive`, ours.persistentKeepalive, theirs.persistentKeepalive);
  }
  return problems;
}
