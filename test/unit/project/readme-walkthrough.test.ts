/**
 * Issue 32, done-when 5: the README walkthrough that the release check runs in the VM
 * (scripts/release/readme-walkthrough.sh) includes the dual-stack host set-up and a dual-stack
 * client reaching an IPv6 address through the tunnel. The walkthrough runs what the README marks
 * (`<!-- walkthrough: KIND -->` right above a fence, as scripts/release/readme-blocks.sh reads
 * them); this test holds the README to marking those steps, in an order that can work, so that an
 * edit of the README cannot drop them from CI unnoticed.
 */
import { expect } from 'chai';
import { readFileSync } from 'node:fs';
import path from 'node:path';

const ROOT = path.resolve(__dirname, '../../../..');
const README = readFileSync(path.join(ROOT, 'README.md'), 'utf8');

interface Block {
  kind: string;
  body: string;
}

/** The marked blocks in README order, as readme-blocks.sh extracts them. */
function markedBlocks(): Block[] {
  const blocks: Block[] = [];
  const pattern =
    /^<!-- walkthrough: *([a-z]+)(?:, *check: *[a-z]+)? *-->\n```sh\n([\s\S]*?)^```/gm;
  for (const match of README.matchAll(pattern)) blocks.push({ kind: match[1]!, body: match[2]! });
  return blocks;
}

describe('README.md: the walkthrough runs dual stack (issue 32)', () => {
  const blocks = markedBlocks();
  const index = (kind: string, test: (body: string) => boolean): number =>
    blocks.findIndex((b) => b.kind === kind && test(b.body));

  it('runs the IPv6 forwarding and the ip6 masquerade of the host set-up on the server', () => {
    expect(
      index('server', (b) => b.includes('sysctl -w net.ipv6.conf.all.forwarding=1')),
    ).to.be.at.least(0);
    expect(index('server', (b) => /table ip6 vpn-nat6[\s\S]*masquerade/.test(b))).to.be.at.least(0);
  });

  it('starts the daemon dual-stack after that set-up, on an interface it creates', () => {
    const forwarding = index('server', (b) => b.includes('net.ipv6.conf.all.forwarding=1'));
    const masquerade = index('server', (b) => b.includes('table ip6 vpn-nat6'));
    const start = index('daemon', (b) => /^wg-peerd .*--address6 fd42:42:42::1\/64/m.test(b));
    expect(start).to.be.greaterThan(Math.max(forwarding, masquerade));
    // --address6 counts only when wg-peerd creates the interface: the block makes sure it does.
    expect(blocks[start]!.body).to.match(/^ip link del wg0\b/m);
  });

  it('has a client of that daemon ping an IPv6 address outside the VPN, through the tunnel', () => {
    const start = index('daemon', (b) => b.includes('--address6'));
    const create = blocks.findIndex(
      (b, i) => i > start && b.kind === 'server' && b.body.includes('POST'),
    );
    const client = blocks.findIndex(
      (b, i) => i > create && b.kind === 'client' && /^ping .*2606:4700:4700::1111/m.test(b.body),
    );
    expect(create).to.be.greaterThan(start);
    expect(client).to.be.greaterThan(create);
    expect(blocks[client]!.body).to.match(/^wg-quick up \.\/client\.conf$/m);
  });
});
