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

/** The DER SubjectPublicKeyInfo of an X25519 key ends with the 32-byte key (RFC 8410 §4). */
const X25519_KEY_BYTES = 32;

/**
 * A fresh random public key from OpenSSL's X25519 (native, so thousands of them stay cheap even
 * in the emulated VM, where tweetnacl's pure-JS scalar multiplication takes tens of ms each).
 *
 * Both keys come back already encoded (DER), never as KeyObjects to export: in Node 20,
 * `generateKeyPairSync(...).publicKey.export()` deadlocks the main thread when a garbage
 * collection runs inside the export and finalizes the same key's KeyGenJob, whose destructor
 * takes the key's mutex that the export holds (gdb: `~KeyGenJob` → `uv_mutex_lock` under
 * `KeyObjectHandle::ExportJWK`). That hung the kernel suite in CI and here ("adds 1,000 peers in
 * one call"); `node --max-semi-space-size=1` reproduces it on the host within seconds, the encoded
 * form never did in 900,000 keys.
 */
export function randomPublicKey(): string {
  const { publicKey } = generateKeyPairSync('x25519', {
    publicKeyEncoding: { type: 'spki', format: 'der' },
    privateKeyEncoding: { type: 'pkcs8', format: 'der' },
  });
  return publicKey.subarray(publicKey.length - X25519_KEY_BYTES).toString('base64');
}
