/**
 * Deterministic WireGuard key pairs for tests and transcript scenarios: the private key is
 * SHA-256 of a label, clamped as `wg genkey` clamps (RFC 7748 §5), the public key is X25519 of
 * it with the base point. Deterministic keys make recorded requests replayable byte for byte.
 */
import { createHash, generateKeyPairSync } from 'node:crypto';
import nacl from 'tweetnacl';

export interface TestKeyPair {
  privateKey: Buffer;
  publicKey: string;
  privateKeyBase64: string;
}

export function testKeyPair(label: string): TestKeyPair {
  const privateKey = createHash('sha256').update(label).digest();
  privateKey[0] &= 248;
  privateKey[31] = (privateKey[31] & 127) | 64;
  const publicKey = Buffer.from(nacl.scalarMult.base(privateKey)).toString('base64');
  return { privateKey, publicKey, privateKeyBase64: privateKey.toString('base64') };
}

/**
 * A fresh random public key from OpenSSL's X25519 (native, so thousands of them stay cheap even
 * in the emulated VM, where tweetnacl's pure-JS scalar multiplication takes tens of ms each).
 */
export function randomPublicKey(): string {
  const { publicKey } = generateKeyPairSync('x25519');
  const jwk = publicKey.export({ format: 'jwk' });
  return Buffer.from(String(jwk.x), 'base64url').toString('base64');
}
