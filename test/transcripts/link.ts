/**
 * rtnetlink link scenarios: create a WireGuard interface, address it, bring it up, read it back,
 * find the primary IPv4 address behind a default route, delete it.
 */
import { Links } from '../../src/kernel/link';
import type { Ipv4Address, LinkInfo } from '../../src/kernel/types';
import type { Scenario } from './scenario';

export const LINK_IF = 'wgrec1';

export interface LinkScenarioResult {
  created: LinkInfo;
  addresses: Ipv4Address[];
  primary: string | null;
  /** The typed kernel error, and the errno it was decided from (its cause). */
  missing: { type: string; code: string; message: string };
  afterDelete: string;
}

export const linkLifecycle: Scenario<LinkScenarioResult> = {
  name: 'link-lifecycle',
  description:
    'RTM_NEWLINK kind wireguard, RTM_NEWADDR, RTM_NEWLINK up, RTM_GETLINK, RTM_GETADDR, RTM_GETROUTE default route source, RTM_GETLINK of a missing link, RTM_DELLINK',
  setup(sh) {
    // A default route through a veth, so the primary address has a source to be found from.
    sh('ip link add recveth0 type veth peer name recveth1');
    sh(
      'ip addr add 192.0.2.10/24 dev recveth0 && ip link set recveth0 up && ip link set recveth1 up',
    );
    sh('ip route replace default via 192.0.2.1 dev recveth0');
  },
  async run({ open, recording, sh, oracle }) {
    const links = new Links(open);
    try {
      const index = await links.createWireGuard(LINK_IF);
      await links.addIpv4Address(index, { address: '10.66.0.1', prefixLength: 24 });
      await links.setUp(index);
      const created = await links.getLink(LINK_IF);
      const addresses = await links.getIpv4Addresses(index);
      const primary = await links.primaryIpv4();
      if (recording) {
        oracle.link = JSON.parse(sh(`ip -j -d link show ${LINK_IF}`));
        oracle.addresses = JSON.parse(sh(`ip -j -4 addr show dev ${LINK_IF}`));
        oracle.route = JSON.parse(sh('ip -j -4 route get 198.51.100.1'));
      }
      const missing = await links.getLink('nosuch0').then(
        () => ({ type: 'none', code: 'none', message: 'no error' }),
        (error: Error & { cause?: { code?: string } }) => ({
          type: error.name,
          code: error.cause?.code ?? '',
          message: error.message,
        }),
      );
      await links.deleteLink(index);
      const afterDelete = recording ? sh(`ip link show ${LINK_IF} 2>&1 || true`) : '';
      if (recording) oracle.afterDelete = afterDelete;
      return { created, addresses, primary, missing, afterDelete };
    } finally {
      links.close();
    }
  },
  teardown(sh) {
    sh(`ip link del ${LINK_IF} 2>/dev/null || true; ip link del recveth0 2>/dev/null || true`);
  },
};
