import { expect } from 'chai';
import type { IpPrefix, Ipv4Address } from '../../../src/kernel/types';
import { allocateAddress } from '../../../src/peers/allocator';

function v4(text: string): IpPrefix {
  const [address, cidr] = text.split('/');
  return { family: 4, address: address!, cidr: Number(cidr) };
}

function allocate(subnet: string, peers: string[], extraServers: string[] = []): string | null {
  const [address, prefix] = subnet.split('/');
  const server: Ipv4Address = { address: address!, prefixLength: Number(prefix) };
  return allocateAddress({
    subnet: server,
    serverAddresses: [server, ...extraServers.map((a) => ({ address: a, prefixLength: 32 }))],
    allowedIps: peers.map((p) =>
      p.includes(':') ? ({ family: 6, address: p.split('/')[0]!, cidr: 128 } as IpPrefix) : v4(p),
    ),
  });
}

// DESIGN §3: the lowest free address of the interface's IPv4 subnet, not the network, broadcast
// or server address, nor any address inside any peer's allowed IPs.
describe('peers/allocator: lowest free address', () => {
  it('gives the first host after the server in an empty /24', () => {
    expect(allocate('10.8.0.1/24', [])).to.equal('10.8.0.2');
  });

  it('skips addresses held by peers', () => {
    expect(allocate('10.8.0.1/24', ['10.8.0.2/32', '10.8.0.3/32'])).to.equal('10.8.0.4');
  });

  it('fills the lowest hole first', () => {
    expect(
      allocate('10.8.0.1/24', ['10.8.0.2/32', '10.8.0.4/32', '10.8.0.3/32', '10.8.0.6/32']),
    ).to.equal('10.8.0.5');
    expect(allocate('10.8.0.1/24', ['10.8.0.3/32'])).to.equal('10.8.0.2');
  });

  it('never gives the network address, even when the server is not at .1', () => {
    expect(allocate('10.8.0.5/24', [])).to.equal('10.8.0.1');
  });

  it('gives the one free host of a /30 and then nothing (network and broadcast excluded)', () => {
    expect(allocate('10.8.0.1/30', [])).to.equal('10.8.0.2');
    expect(allocate('10.8.0.1/30', ['10.8.0.2/32'])).to.equal(null);
    expect(allocate('10.8.0.2/30', [])).to.equal('10.8.0.1');
  });

  it('reports a full /24 (server + 253 peers) as exhausted', () => {
    const peers = Array.from({ length: 253 }, (_, i) => `10.8.0.${i + 2}/32`);
    expect(allocate('10.8.0.1/24', peers)).to.equal(null);
    expect(allocate('10.8.0.1/24', peers.slice(0, 252))).to.equal('10.8.0.254');
  });

  it('never gives the broadcast address', () => {
    const peers = Array.from({ length: 252 }, (_, i) => `10.8.0.${i + 2}/32`);
    expect(allocate('10.8.0.1/24', peers)).to.equal('10.8.0.254');
    expect(allocate('10.8.0.1/24', [...peers, '10.8.0.254/32'])).to.not.equal('10.8.0.255');
  });

  it('treats every address inside a wide allowed IP as taken', () => {
    expect(allocate('10.8.0.1/24', ['10.8.0.0/25'])).to.equal('10.8.0.128');
    expect(allocate('10.8.0.1/24', ['10.8.0.4/30', '10.8.0.2/32', '10.8.0.3/32'])).to.equal(
      '10.8.0.8',
    );
  });

  it('reads an allowed IP with host bits set as its whole prefix', () => {
    // 10.8.0.5/30 covers .4 to .7.
    expect(allocate('10.8.0.1/24', ['10.8.0.2/32', '10.8.0.3/32', '10.8.0.5/30'])).to.equal(
      '10.8.0.8',
    );
  });

  it('is exhausted when a peer routes everything (0.0.0.0/0)', () => {
    expect(allocate('10.8.0.1/24', ['0.0.0.0/0'])).to.equal(null);
  });

  it('is exhausted when a peer holds a supernet of the subnet', () => {
    expect(allocate('10.8.0.1/24', ['10.8.0.0/16'])).to.equal(null);
  });

  it('ignores allowed IPs outside the subnet and IPv6 ones', () => {
    expect(allocate('10.8.0.1/24', ['10.9.0.2/32', '192.168.0.0/16', 'fd00::2'])).to.equal(
      '10.8.0.2',
    );
  });

  it('excludes every address of the server, not only the one the subnet comes from', () => {
    expect(allocate('10.8.0.1/24', [], ['10.8.0.2'])).to.equal('10.8.0.3');
  });

  it('handles subnets at the top of the address space without overflow', () => {
    expect(allocate('255.255.255.253/30', [])).to.equal('255.255.255.254');
    expect(allocate('255.255.255.253/30', ['255.255.255.254/32'])).to.equal(null);
  });

  it('finds the first hole after 10,000 peers in a /16', () => {
    // Peers hold 10.8.0.2 .. 10.8.39.17 (10,000 addresses after the server's .1), so the lowest
    // free host address is the next one. (Speed belongs in a benchmark, not a timed test.)
    const peers: string[] = [];
    for (let i = 0; i < 10_000; i += 1)
      peers.push(`10.8.${Math.floor((i + 2) / 256)}.${(i + 2) % 256}/32`);
    expect(allocate('10.8.0.1/16', peers)).to.equal('10.8.39.18');
  });
});
