import { expect } from 'chai';
import { replay } from '../../support/transcripts';
import { diffDeviceAgainstDump, parseWgDump } from '../../support/wg-dump';
import {
  WG_IF,
  type WireGuardScenarioResult,
  peerKeys,
  serverKeys,
  wideAllowedIps,
  wireguardDevice,
} from '../../transcripts/wireguard';

// Replays the kernel's own answers (recorded in the VM) and checks what the client made of them
// against `wg show <if> dump` as recorded at the same moment.
describe('WireGuard client (recorded transcript)', () => {
  let result: WireGuardScenarioResult;
  let oracle: Record<string, unknown>;

  before(async () => {
    ({ result, oracle } = await replay(wireguardDevice));
  });

  it('reads the device as wg show dump reports it, field by field', () => {
    expect(diffDeviceAgainstDump(result.before, parseWgDump(String(oracle.before)))).to.deep.equal(
      [],
    );
    expect(result.before.name).to.equal(WG_IF);
    expect(result.before.publicKey).to.equal(serverKeys.publicKey);
    expect(result.before.ifindex).to.be.greaterThan(0);
  });

  it('decodes IPv4 and IPv6 endpoints and mixed-family allowed IPs', () => {
    const second = result.before.peers.find((p) => p.publicKey === peerKeys[1].publicKey);
    expect(second?.endpoint).to.equal('[2001:db8::9]:51820');
    expect(second?.allowedIps).to.deep.include({ family: 6, address: 'fd00::3', cidr: 128 });
  });

  it('adds peers in several messages and reads a 600-address peer back whole', () => {
    expect(
      diffDeviceAgainstDump(result.afterAdd, parseWgDump(String(oracle.afterAdd))),
    ).to.deep.equal([]);
    const wide = result.afterAdd.peers.find((p) => p.publicKey === peerKeys[3].publicKey);
    expect(wide?.allowedIps.map((ip) => ip.address).sort()).to.deep.equal(
      wideAllowedIps.map((ip) => ip.address).sort(),
    );
    expect(wide?.persistentKeepalive).to.equal(15);
  });

  it('removes peers, an unknown key being no error', () => {
    expect(
      diffDeviceAgainstDump(result.afterRemove, parseWgDump(String(oracle.afterRemove))),
    ).to.deep.equal([]);
    expect(result.afterRemove.peers.map((p) => p.publicKey).sort()).to.deep.equal(
      [peerKeys[1].publicKey, peerKeys[3].publicKey].sort(),
    );
  });

  it('fails on a missing device with InterfaceMissing (from ENODEV) naming it', () => {
    expect(result.missing.type).to.equal('InterfaceMissingError');
    expect(result.missing.code).to.equal('ENODEV');
    expect(result.missing.message).to.contain('wgnope0');
    expect(String(oracle.missing)).to.match(/No such device/);
  });
});
