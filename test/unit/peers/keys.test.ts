import { expect } from 'chai';
import nacl from 'tweetnacl';
import { ValidationError } from '../../../src/peers/errors';
import {
  clampPrivateKey,
  generateKeyPair,
  generatePrivateKey,
  parsePublicKey,
  publicKeyOf,
} from '../../../src/peers/keys';

function b64(bytes: number[] | Buffer): string {
  return Buffer.from(bytes).toString('base64');
}

/** A key whose standard base64 contains '+', '/' and '=': "++++////..." */
const SLASHY = Buffer.concat([
  Buffer.from([0xfb, 0xef, 0xbe, 0xff, 0xff, 0xff]),
  Buffer.alloc(26, 0x41),
]);
const SLASHY_B64 = SLASHY.toString('base64');

describe('peers/keys: X25519 key pairs', () => {
  it('derives the public key of RFC 7748 §6.1 (Alice)', () => {
    const alicePrivate = Buffer.from(
      '77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a',
      'hex',
    );
    expect(Buffer.from(publicKeyOf(alicePrivate)).toString('hex')).to.equal(
      '8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a',
    );
  });

  it('clamps like wg genkey: k[0] &= 248, k[31] &= 127, k[31] |= 64', () => {
    const key = clampPrivateKey(new Uint8Array(32).fill(0xff));
    expect(key[0]).to.equal(0xf8);
    expect(key[31]).to.equal(0x7f);
    expect(key.subarray(1, 31).every((b) => b === 0xff)).to.equal(true);
    const low = clampPrivateKey(new Uint8Array(32).fill(0));
    expect(low[0]).to.equal(0);
    expect(low[31]).to.equal(0x40);
  });

  it('makes a base64 pair whose public key is the X25519 base point multiple of the private key', () => {
    const pair = generateKeyPair();
    expect(pair.privateKey).to.have.length(44);
    expect(pair.publicKey).to.have.length(44);
    const secret = Buffer.from(pair.privateKey, 'base64');
    expect(secret).to.have.length(32);
    expect(secret[0]! & 7).to.equal(0);
    expect(secret[31]! & 0xc0).to.equal(0x40);
    expect(b64(Buffer.from(nacl.scalarMult.base(secret)))).to.equal(pair.publicKey);
  });

  it('uses the random source it is given, clamped', () => {
    const pair = generateKeyPair((n) => new Uint8Array(n).fill(0xff));
    const expected = new Uint8Array(32).fill(0xff);
    expected[0] = 0xf8;
    expected[31] = 0x7f;
    expect(pair.privateKey).to.equal(b64(Buffer.from(expected)));
    expect(
      generatePrivateKey((n) => new Uint8Array(n).fill(0xff)).equals(Buffer.from(expected)),
    ).to.equal(true);
  });

  it('never gives the same key twice in a row', () => {
    expect(generateKeyPair().privateKey).to.not.equal(generateKeyPair().privateKey);
  });
});

describe('peers/keys: public keys from URL paths (DESIGN §3)', () => {
  it('accepts standard base64 of 32 bytes as is', () => {
    expect(SLASHY_B64).to.match(/^\+\+\+\+\/\/\/\/.*=$/);
    expect(parsePublicKey(SLASHY_B64)).to.equal(SLASHY_B64);
  });

  it('accepts the URL-safe alphabet and returns the standard form', () => {
    const urlSafe = SLASHY_B64.replace(/\+/g, '-').replace(/\//g, '_');
    expect(parsePublicKey(urlSafe)).to.equal(SLASHY_B64);
  });

  it('accepts a key without its padding', () => {
    expect(parsePublicKey(SLASHY_B64.slice(0, 43))).to.equal(SLASHY_B64);
    const urlSafe = SLASHY_B64.replace(/\+/g, '-').replace(/\//g, '_').slice(0, 43);
    expect(parsePublicKey(urlSafe)).to.equal(SLASHY_B64);
  });

  const bad: Array<[string, string]> = [
    ['empty', ''],
    ['too short', SLASHY_B64.slice(0, 40)],
    ['too long', `${SLASHY_B64}A`],
    ['33 bytes', b64(Buffer.alloc(33, 1))],
    ['31 bytes', b64(Buffer.alloc(31, 1))],
    ['non-zero trailing bits', `${SLASHY_B64.slice(0, 42)}B=`],
    ['both alphabets mixed', `-${SLASHY_B64.slice(1)}`],
    ['a space', `${SLASHY_B64.slice(0, 20)} ${SLASHY_B64.slice(21)}`],
    ['still percent-encoded', SLASHY_B64.replace('/', '%2F')],
    ['hex', 'ab'.repeat(32)],
    ['double padding', `${SLASHY_B64.slice(0, 42)}A==`],
  ];
  for (const [what, text] of bad) {
    it(`rejects ${what} with a validation error`, () => {
      expect(() => parsePublicKey(text))
        .to.throw(ValidationError)
        .with.property('code', 'INVALID_PUBLIC_KEY');
    });
  }
});
