import { expect } from 'chai';
import type { IpPrefix, Ipv4Address } from '../../../src/kernel/types';
import { allocateAddress, allocateAddress6 } from '../../../src/peers/allocator';

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

function allocate6(prefix: string, peers: string[], extraServers: string[] = []): string | null {
  const [address, length] = prefix.split('/');
  const server = { address: address!, prefixLength: Number(length) };
  return allocateAddress6({
    prefix: server,
    serverAddresses: [server, ...extraServers.map((a) => ({ address: a, prefixLength: 128 }))],
    allowedIps: peers.map((p) => {
      const [text, cidr] = p.split('/');
      return { family: p.includes(':') ? 6 : 4, address: text!, cidr: Number(cidr) } as IpPrefix;
    }),
  });
}

// Issue 18: on a dual-stack interface each peer also gets the lowest free /128 of the prefix,
// skipping the server's own and any address inside any peer's allowed IPs.
describe('peers/allocator: lowest free IPv6 address', () => {
  it('gives the first address after the server in an empty /64', () => {
    expect(allocate6('fd42::1/64', [])).to.equal('fd42::2');
  });

  it('never gives the Subnet-Router anycast address (the prefix itself, RFC 4291 §2.6.1)', () => {
    expect(allocate6('fd42::5/64', [])).to.equal('fd42::1');
  });

  it('skips addresses held by peers and fills the lowest hole first', () => {
    expect(allocate6('fd42::1/64', ['fd42::2/128', 'fd42::3/128'])).to.equal('fd42::4');
    expect(
      allocate6('fd42::1/64', ['fd42::2/128', 'fd42::4/128', 'fd42::3/128', 'fd42::6/128']),
    ).to.equal('fd42::5');
    expect(allocate6('fd42::1/64', ['fd42::3/128'])).to.equal('fd42::2');
  });

  it('treats every address inside a wide allowed IP as taken, host bits set or not', () => {
    expect(allocate6('fd42::1/64', ['fd42::/120'])).to.equal('fd42::100');
    // fd42::5/126 covers fd42::4 to fd42::7.
    expect(allocate6('fd42::1/64', ['fd42::2/128', 'fd42::3/128', 'fd42::5/126'])).to.equal(
      'fd42::8',
    );
  });

  it('is exhausted when a peer routes everything (::/0) or a supernet of the prefix', () => {
    expect(allocate6('fd42::1/64', ['::/0'])).to.equal(null);
    expect(allocate6('fd42::1/64', ['fd42::/48'])).to.equal(null);
  });

  it('reports a full /120 (server + 254 peers) as exhausted, and gives its last address', () => {
    const peers = Array.from({ length: 254 }, (_, i) => `fd42::${(i + 2).toString(16)}/128`);
    expect(allocate6('fd42::1/120', peers)).to.equal(null);
    expect(allocate6('fd42::1/120', peers.slice(0, 253))).to.equal('fd42::ff');
  });

  it('ignores IPv4 allowed IPs and IPv6 ones outside the prefix', () => {
    expect(allocate6('fd42::1/64', ['10.8.0.2/32', '0.0.0.0/0', 'fd43::2/128'])).to.equal(
      'fd42::2',
    );
  });

  it('excludes every IPv6 address of the server, not only the one the prefix comes from', () => {
    expect(allocate6('fd42::1/64', [], ['fd42::2'])).to.equal('fd42::3');
  });

  it('carries into the next group (RFC 5952 text of a 128-bit sum)', () => {
    expect(allocate6('fd42::1/64', ['fd42::/112'])).to.equal('fd42::1:0');
  });

  it('stays at the top of the address space without overflow', () => {
    expect(allocate6('ffff:ffff:ffff:ffff::1/64', ['ffff:ffff:ffff:ffff::/65'])).to.equal(
      'ffff:ffff:ffff:ffff:8000::',
    );
    expect(allocate6('ffff:ffff:ffff:ffff::1/64', ['ffff:ffff:ffff:ffff::/64'])).to.equal(null);
  });

  it('finds the first hole after 10,000 peers in a /64', () => {
    const peers: string[] = [];
    for (let i = 2; i < 10_002; i += 1) peers.push(`fd42::${i.toString(16)}/128`);
    expect(allocate6('fd42::1/64', peers)).to.equal(`fd42::${(10_002).toString(16)}`);
  });
});
