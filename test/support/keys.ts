/**
 * Deterministic WireGuard key pairs for tests and transcript scenarios: the private key is
 * SHA-256 of a label, clamped as `wg genkey` clamps (RFC 7748 §5), the public key is X25519 of
 * it with the base point. Deterministic keys make recorded requests replayable byte for byte.
 */
import { createHash } from 'node:crypto';
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
