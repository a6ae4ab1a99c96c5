/**
 * WireGuard client scenarios: read a device set up with `wg`, add and remove peers (one with
 * 600 allowed IPs, so both the SET and the GET dump span several messages), read a missing one.
 */
import { WireGuard } from '../../src/kernel/wireguard';
import type { WireGuardDevice } from '../../src/kernel/types';
import { testKeyPair } from '../support/keys';
import type { Scenario } from './scenario';

export const WG_IF = 'wgrec0';
export const serverKeys = testKeyPair('transcript server');
export const peerKeys = [1, 2, 3, 4, 5].map((n) => testKeyPair(`transcript peer ${n}`));

/** 600 host addresses 10.60.x.y/32, more than one SET entry (256) and one dump message hold. */
export const wideAllowedIps = Array.from({ length: 600 }, (_, i) => ({
  family: 4 as const,
  address: `10.60.${Math.floor(i / 250)}.${(i % 250) + 1}`,
  cidr: 32,
}));

export interface WireGuardScenarioResult {
  before: WireGuardDevice;
  afterAdd: WireGuardDevice;
  afterRemove: WireGuardDevice;
  /** The typed kernel error, and the errno it was decided from (its cause). */
  missing: { type: string; code: string; message: string };
}

export const wireguardDevice: Scenario<WireGuardScenarioResult> = {
  name: 'wireguard-device',
  description:
    'WG_CMD_GET_DEVICE of a device configured with wg; WG_CMD_SET_DEVICE adding 2 peers (one with 600 allowed IPs) and removing 3 (one unknown); GET of a missing device',
  setup(sh) {
    sh(`ip link add ${WG_IF} type wireguard`);
    sh(`umask 077; echo ${serverKeys.privateKeyBase64} > /tmp/${WG_IF}.key`);
    sh(`wg set ${WG_IF} private-key /tmp/${WG_IF}.key listen-port 51820 fwmark 0x42`);
    sh(
      `wg set ${WG_IF} peer ${peerKeys[0].publicKey} allowed-ips 10.50.0.2/32 endpoint 192.0.2.7:51000 persistent-keepalive 25`,
    );
    sh(
      `wg set ${WG_IF} peer ${peerKeys[1].publicKey} allowed-ips 10.50.0.3/32,fd00::3/128 endpoint [2001:db8::9]:51820`,
    );
    sh(`ip link set ${WG_IF} up`);
  },
  async run({ open, recording, sh, oracle }) {
    const wireguard = new WireGuard(open);
    const dump = (key: string): void => {
      if (recording) oracle[key] = sh(`wg show ${WG_IF} dump`);
    };
    try {
      const before = await wireguard.getDevice(WG_IF);
      dump('before');
      await wireguard.addPeers(WG_IF, [
        {
          publicKey: peerKeys[2].publicKey,
          allowedIps: [{ family: 4, address: '10.50.0.4', cidr: 32 }],
        },
        { publicKey: peerKeys[3].publicKey, allowedIps: wideAllowedIps, persistentKeepalive: 15 },
      ]);
      const afterAdd = await wireguard.getDevice(WG_IF);
      dump('afterAdd');
      await wireguard.removePeers(WG_IF, [
        peerKeys[0].publicKey,
        peerKeys[2].publicKey,
        peerKeys[4].publicKey,
      ]);
      const afterRemove = await wireguard.getDevice(WG_IF);
      dump('afterRemove');
      const missing = await wireguard.getDevice('wgnope0').then(
        () => ({ type: 'none', code: 'none', message: 'no error' }),
        (error: Error & { cause?: { code?: string } }) => ({
          type: error.name,
          code: error.cause?.code ?? '',
          message: error.message,
        }),
      );
      if (recording) oracle.missing = sh('wg show wgnope0 dump 2>&1 || true');
      return { before, afterAdd, afterRemove, missing };
    } finally {
      wireguard.close();
    }
  },
  teardown(sh) {
    sh(`ip link del ${WG_IF} 2>/dev/null || true; rm -f /tmp/${WG_IF}.key`);
  },
};
