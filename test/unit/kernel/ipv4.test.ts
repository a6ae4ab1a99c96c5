import { expect } from 'chai';
import {
  bytesToIpv4,
  ipv4ToBytes,
  ipv4ToNumber,
  isIpv4,
  numberToIpv4,
} from '../../../src/kernel/ipv4';

// The one IPv4 parser of the daemon: dotted quad, four decimal octets 0-255, no leading zeros.
describe('kernel/ipv4: one strict parser and formatter', () => {
  const bad = [
    '...',
    '1.2.3',
    '01.2.3.4',
    '256.1.1.1',
    '1.2.3.4.5',
    ' 1.2.3.4',
    '1.2.3.4 ',
    '1.2.3.-4',
    '0x1.2.3.4',
    '',
    '1..3.4',
  ];

  for (const text of bad) {
    it(`rejects ${JSON.stringify(text)} everywhere`, () => {
      expect(isIpv4(text)).to.equal(false);
      expect(() => ipv4ToNumber(text)).to.throw(RangeError);
      expect(() => ipv4ToBytes(text)).to.throw(RangeError);
    });
  }

  it('reads and writes the ends of the range and a usual address (RFC 791 byte order)', () => {
    expect(ipv4ToNumber('0.0.0.0')).to.equal(0);
    expect(ipv4ToNumber('255.255.255.255')).to.equal(0xffffffff);
    expect(ipv4ToNumber('10.8.0.1')).to.equal(0x0a080001);
    expect([...ipv4ToBytes('10.8.0.1')]).to.deep.equal([10, 8, 0, 1]);
    expect(bytesToIpv4(Buffer.from([192, 0, 2, 255]))).to.equal('192.0.2.255');
    expect(numberToIpv4(0xc0000201)).to.equal('192.0.2.1');
  });

  it('refuses byte strings that are not 4 long and numbers outside 32 bits', () => {
    expect(() => bytesToIpv4(Buffer.from([1, 2, 3]))).to.throw(RangeError);
    expect(() => bytesToIpv4(Buffer.alloc(16))).to.throw(RangeError);
    expect(() => numberToIpv4(-1)).to.throw(RangeError);
    expect(() => numberToIpv4(2 ** 32)).to.throw(RangeError);
  });
});
