import { expect } from 'chai';
import { replay } from '../../support/transcripts';
import { LINK_IF, type LinkScenarioResult, linkLifecycle } from '../../transcripts/link';

interface IpLink {
  ifindex: number;
  ifname: string;
  mtu: number;
  flags: string[];
  linkinfo?: { info_kind?: string };
}
interface IpAddr {
  addr_info: Array<{ family: string; local: string; prefixlen: number }>;
}
interface IpRoute {
  prefsrc?: string;
}

// Checked against `ip -j` output recorded in the VM at the same moment.
describe('rtnetlink links (recorded transcript)', () => {
  let result: LinkScenarioResult;
  let oracle: Record<string, unknown>;

  before(async () => {
    ({ result, oracle } = await replay(linkLifecycle));
  });

  it('creates a WireGuard link that ip reports with the same index, kind, MTU and up flag', () => {
    const [link] = oracle.link as IpLink[];
    expect(result.created).to.deep.equal({
      index: link.ifindex,
      name: LINK_IF,
      kind: link.linkinfo?.info_kind,
      up: link.flags.includes('UP'),
      mtu: link.mtu,
    });
    expect(result.created.kind).to.equal('wireguard');
    expect(result.created.mtu).to.equal(1420);
  });

  it('reads back the address ip shows', () => {
    const [entry] = oracle.addresses as IpAddr[];
    expect(result.addresses).to.deep.equal(
      entry.addr_info.map((a) => ({ address: a.local, prefixLength: a.prefixlen })),
    );
  });

  it('finds the primary address the kernel would use as source for the default route', () => {
    const [route] = oracle.route as IpRoute[];
    expect(result.primary).to.equal(route.prefsrc);
  });

  it('fails on a missing link with InterfaceMissing (from ENODEV) naming it', () => {
    expect(result.missing.type).to.equal('InterfaceMissingError');
    expect(result.missing.code).to.equal('ENODEV');
    expect(result.missing.message).to.contain('nosuch0');
  });

  it('deletes the link', () => {
    expect(String(oracle.afterDelete)).to.match(/does not exist/);
  });
});
