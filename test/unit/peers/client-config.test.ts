import { expect } from 'chai';
import { formatEndpoint, renderClientConfig } from '../../../src/peers/client-config';

/** Parses wg-quick INI text into sections of key → value. */
function parse(text: string): Array<{ section: string; values: Record<string, string> }> {
  const sections: Array<{ section: string; values: Record<string, string> }> = [];
  for (const line of text.split('\n')) {
    const header = /^\[(\w+)\]$/.exec(line);
    if (header) {
      sections.push({ section: header[1]!, values: {} });
      continue;
    }
    const pair = /^(\w+) = (.+)$/.exec(line);
    if (pair) sections[sections.length - 1]!.values[pair[1]!] = pair[2]!;
  }
  return sections;
}

describe('peers/client-config: the wg-quick text of a new peer', () => {
  it('holds [Interface] and [Peer] with the values a client needs', () => {
    const text = renderClientConfig({
      privateKey: 'cHJpdmF0ZS1rZXktcHJpdmF0ZS1rZXktcHJpdmF0ZSE=',
      address: '10.8.0.7',
      serverPublicKey: 'c2VydmVyLWtleS1zZXJ2ZXIta2V5LXNlcnZlci1rZXk=',
      endpoint: 'vpn.example.net:51820',
      allowedIps: '10.8.0.0/24',
    });
    expect(parse(text)).to.deep.equal([
      {
        section: 'Interface',
        values: {
          PrivateKey: 'cHJpdmF0ZS1rZXktcHJpdmF0ZS1rZXktcHJpdmF0ZSE=',
          Address: '10.8.0.7/32',
        },
      },
      {
        section: 'Peer',
        values: {
          PublicKey: 'c2VydmVyLWtleS1zZXJ2ZXIta2V5LXNlcnZlci1rZXk=',
          Endpoint: 'vpn.example.net:51820',
          AllowedIPs: '10.8.0.0/24',
          PersistentKeepalive: '25',
        },
      },
    ]);
    expect(text.endsWith('\n')).to.equal(true);
  });

  it('writes endpoints as host:port, IPv6 in brackets', () => {
    expect(formatEndpoint('203.0.113.1', 51820)).to.equal('203.0.113.1:51820');
    expect(formatEndpoint('vpn.example.net', 1)).to.equal('vpn.example.net:1');
    expect(formatEndpoint('2001:db8::1', 51820)).to.equal('[2001:db8::1]:51820');
    expect(formatEndpoint('[2001:db8::1]', 51820)).to.equal('[2001:db8::1]:51820');
  });
});
