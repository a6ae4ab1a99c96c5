/**
 * WireGuard keys: X25519 with tweetnacl, base64 text as `wg` prints it, and the lenient but exact
 * parsing of public keys that arrive in URL paths.
 */
import { randomBytes } from 'node:crypto';
import nacl from 'tweetnacl';
import { ValidationError } from './errors';

export const KEY_LENGTH = 32;

export interface KeyPair {
  /** Standard base64, 44 characters. */
  privateKey: string;
  publicKey: string;
}

export type RandomSource = (length: number) => Uint8Array;

export const defaultRandom: RandomSource = (length) => randomBytes(length);

/** Clamps 32 random bytes into an X25519 private key exactly as `wg genkey` does. */
export function clampPrivateKey(key: Uint8Array): Uint8Array {
  if (key.length !== KEY_LENGTH) throw new RangeError('a private key has 32 bytes');
  key[0] = key[0]! & 248;
  key[31] = (key[31]! & 127) | 64;
  return key;
}

/** A fresh clamped private key as raw bytes (for configuring the interface itself). */
export function generatePrivateKey(random: RandomSource = defaultRandom): Buffer {
  return Buffer.from(clampPrivateKey(Uint8Array.from(random(KEY_LENGTH))));
}

export function publicKeyOf(privateKey: Uint8Array): Uint8Array {
  return nacl.scalarMult.base(privateKey);
}

export function generateKeyPair(random: RandomSource = defaultRandom): KeyPair {
  const secret = clampPrivateKey(Uint8Array.from(random(KEY_LENGTH)));
  const pair = {
    privateKey: Buffer.from(secret).toString('base64'),
    publicKey: Buffer.from(publicKeyOf(secret)).toString('base64'),
  };
  secret.fill(0);
  return pair;
}

/**
 * A 32-byte key in base64: 42 free characters, then a last character whose two low bits are
 * zero (256 bits = 42 * 6 + 4), then optional padding. Either the standard alphabet (`+` `/`)
 * or the URL-safe one (`-` `_`), not a mix of both.
 */
const STANDARD_KEY = '[A-Za-z0-9+/]{42}[AEIMQUYcgkosw048]=?';
const URL_SAFE_KEY = '[A-Za-z0-9_-]{42}[AEIMQUYcgkosw048]=?';
/** For JSON schemas: the shape of a public key after percent-decoding. */
export const PUBLIC_KEY_PATTERN = `^(?:${STANDARD_KEY}|${URL_SAFE_KEY})$`;
const PUBLIC_KEY_RE = new RegExp(PUBLIC_KEY_PATTERN);

export function isPublicKeyText(text: string): boolean {
  return PUBLIC_KEY_RE.test(text);
}

/**
 * Parses a public key as a client may send it (already percent-decoded): standard or URL-safe
 * base64, padding optional. Returns the canonical standard base64 form that the kernel reports;
 * throws ValidationError for anything else.
 */
export function parsePublicKey(text: string): string {
  if (!isPublicKeyText(text)) {
    throw new ValidationError(
      'The public key must be 44 characters of base64 (32 bytes); in a URL path write / + = as ' +
        '%2F %2B %3D or use the URL-safe alphabet (- _)',
      [{ field: 'publicKey', message: 'must be a base64 WireGuard public key' }],
      'INVALID_PUBLIC_KEY',
    );
  }
  const unpadded = text.replace(/=$/, '').replace(/-/g, '+').replace(/_/g, '/');
  const canonical = `${unpadded}=`;
  const bytes = Buffer.from(canonical, 'base64');
  // The pattern already guarantees this; keep the check next to the decoding it relies on.
  if (bytes.length !== KEY_LENGTH || bytes.toString('base64') !== canonical) {
    throw new ValidationError(
      'The public key does not decode to 32 bytes',
      [],
      'INVALID_PUBLIC_KEY',
    );
  }
  return canonical;
}
