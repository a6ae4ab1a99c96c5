import { expect } from 'chai';
import fc from 'fast-check';
import { isIPv6 } from 'node:net';
import {
  bigIntToIpv6,
  bytesToIpv6,
  hostRange6,
  ipv6ToBigInt,
  ipv6ToBytes,
  isIpv6,
  networkCidr6,
  prefixRange6,
} from '../../../src/kernel/ipv6';

// The one IPv6 parser of the daemon (issue 18): RFC 4291 §2.2 text, written back as RFC 5952.
describe('kernel/ipv6: one strict parser and an RFC 5952 formatter', () => {
  const bad = [
    '',
    ':',
    ':::',
    '1::2::3',
    '1:2:3:4:5:6:7',
    '1:2:3:4:5:6:7:8:9',
    '1:2:3:4:5:6:7::8',
    '12345::',
    'g::1',
    ' ::1',
    '::1 ',
    'fe80::1%wg0',
    '::ffff:10.8.0.1',
    '10.8.0.1',
  ];

  for (const text of bad) {
    it(`rejects ${JSON.stringify(text)} everywhere`, () => {
      expect(isIpv6(text)).to.equal(false);
      expect(() => ipv6ToBigInt(text)).to.throw(RangeError);
      expect(() => ipv6ToBytes(text)).to.throw(RangeError);
    });
  }

  it('writes the examples of RFC 5952 §4 in their recommended form', () => {
    // §4.1 leading zeros, §4.2.2 no "::" for one zero group, §4.2.3 the first of equal runs,
    // §4.3 lowercase; §4.2.1 the longest run.
    expect(bigIntToIpv6(ipv6ToBigInt('2001:0db8:0000:0000:0000:0000:0002:0001'))).to.equal(
      '2001:db8::2:1',
    );
    expect(bigIntToIpv6(ipv6ToBigInt('2001:db8:0:1:1:1:1:1'))).to.equal('2001:db8:0:1:1:1:1:1');
    expect(bigIntToIpv6(ipv6ToBigInt('2001:db8:0:0:1:0:0:1'))).to.equal('2001:db8::1:0:0:1');
    expect(bigIntToIpv6(ipv6ToBigInt('2001:0:0:1:0:0:0:1'))).to.equal('2001:0:0:1::1');
    expect(bigIntToIpv6(ipv6ToBigInt('2001:DB8::AAAA'))).to.equal('2001:db8::aaaa');
    expect(bigIntToIpv6(0n)).to.equal('::');
    expect(bigIntToIpv6(1n)).to.equal('::1');
  });

  it('reads "::" for a single zero group too (RFC 4291 §2.2)', () => {
    expect(ipv6ToBigInt('1:2:3:4:5:6::8')).to.equal(ipv6ToBigInt('1:2:3:4:5:6:0:8'));
  });

  it('agrees with node:net on what is IPv6 text, for texts without a zone or a dotted tail', () => {
    fc.assert(
      fc.property(fc.ipV6(), (text) => {
        fc.pre(!text.includes('.'));
        expect(isIpv6(text)).to.equal(isIPv6(text));
      }),
    );
  });

  it('reads back what it writes, and bytes are network order', () => {
    fc.assert(
      fc.property(fc.uint8Array({ minLength: 16, maxLength: 16 }), (raw) => {
        const bytes = Buffer.from(raw);
        const text = bytesToIpv6(bytes);
        expect(isIPv6(text)).to.equal(true);
        expect(ipv6ToBytes(text).equals(bytes)).to.equal(true);
        expect(bigIntToIpv6(BigInt(`0x${bytes.toString('hex')}`))).to.equal(text);
      }),
    );
    expect([...ipv6ToBytes('fd42::1')]).to.deep.equal([
      0xfd, 0x42, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1,
    ]);
  });

  it('gives a prefix its range, and peers all of it but the Subnet-Router anycast address', () => {
    expect(networkCidr6('fd42:1:2:3::1', 64)).to.equal('fd42:1:2:3::/64');
    const range = prefixRange6('fd42::1', 120);
    expect(bigIntToIpv6(range.first)).to.equal('fd42::');
    expect(bigIntToIpv6(range.last)).to.equal('fd42::ff');
    const hosts = hostRange6('fd42::1', 120);
    expect(bigIntToIpv6(hosts.first)).to.equal('fd42::1');
    expect(hosts.last).to.equal(range.last);
    expect(bigIntToIpv6(prefixRange6('::', 0).last)).to.equal(
      'ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff',
    );
  });
});
