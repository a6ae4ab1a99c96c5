/**
 * Bearer tokens with two scopes (DESIGN §3): admin tokens may do everything, read tokens may only
 * list peers and read metrics. Only SHA-256 digests of the tokens are kept, and a given token is
 * compared with every one of them in constant time, so neither the comparison nor the number of
 * comparisons depends on which token (if any) matched.
 *
 * Each token also has a name for the log (issue 21): the one its file gave it (`name:token`,
 * token-files.ts), else its fingerprint, `sha256:` and the first 8 hex digits of its SHA-256
 * (`printf %s "$TOKEN" | sha256sum | cut -c1-8` finds it); never the token. requireScope puts
 * the name in the request's context (request-log.ts), so the request line and every change line
 * say which token made the change.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type { RequestHandler } from 'express';
import { nameOf, secretOf, type TokenEntry } from '../token-files';
import { HttpError } from './errors';
import { requestContextOf } from './request-log';

export type Scope = 'read' | 'admin';

function digest(text: string): Buffer {
  return createHash('sha256').update(text, 'utf8').digest();
}

export function tokenMatches(given: string, expectedDigest: Buffer): boolean {
  return timingSafeEqual(digest(given), expectedDigest);
}

export interface ScopedTokens {
  admin: readonly TokenEntry[];
  read: readonly TokenEntry[];
}

/** Hex digits of the SHA-256 that name a token without a name: 32 bits, nothing to guess from. */
const FINGERPRINT_HEX_DIGITS = 8;

/** How the log names a token without a name of its own: `sha256:` and 8 hex digits. */
export function tokenFingerprint(token: string): string {
  return `sha256:${digest(token).toString('hex').slice(0, FINGERPRINT_HEX_DIGITS)}`;
}

/** Who a token is: its scope and the name the log gives it. */
export interface TokenIdentity {
  scope: Scope;
  name: string;
}

interface StoredToken {
  digest: Buffer;
  name: string;
}

function stored(entry: TokenEntry): StoredToken {
  const token = secretOf(entry);
  return { digest: digest(token), name: nameOf(entry) ?? tokenFingerprint(token) };
}

/** The accepted tokens, swapped as a whole on SIGHUP (`replace`). */
export class TokenStore {
  private admin: StoredToken[] = [];
  private read: StoredToken[] = [];

  constructor(tokens: ScopedTokens) {
    this.replace(tokens);
  }

  /** Installs a new set; requests that arrive afterwards see only the new tokens. */
  replace(tokens: ScopedTokens): void {
    this.admin = tokens.admin.map(stored);
    this.read = tokens.read.map(stored);
  }

  counts(): { admin: number; read: number } {
    return { admin: this.admin.length, read: this.read.length };
  }

  /** The token's scope and name, or null for an unknown token. Admin wins over read. */
  identify(token: string): TokenIdentity | null {
    const given = digest(token);
    let admin: string | null = null;
    let read: string | null = null;
    // No early exit: every digest is compared whatever matches.
    for (const t of this.admin) if (timingSafeEqual(given, t.digest)) admin ??= t.name;
    for (const t of this.read) if (timingSafeEqual(given, t.digest)) read ??= t.name;
    if (admin !== null) return { scope: 'admin', name: admin };
    return read === null ? null : { scope: 'read', name: read };
  }

  /** The token's scope, or null for an unknown token. */
  scopeOf(token: string): Scope | null {
    return this.identify(token)?.scope ?? null;
  }
}

const BEARER = /^Bearer +(\S+) *$/i;

/** The token of an `Authorization: Bearer <token>` header; null when there is none. */
export function bearerToken(header: string | undefined): string | null {
  const match = header === undefined ? null : BEARER.exec(header);
  return match === null || match[1] === undefined ? null : match[1];
}

/** Whether a token of scope `granted` may do what needs `needed`: admin covers read. */
export function covers(granted: Scope, needed: Scope): boolean {
  return needed === 'read' || granted === 'admin';
}

/**
 * Lets a request through when its bearer token has `scope` (admin covers read). A null store
 * means no authentication is configured: everything passes (loopback by default, DESIGN §3).
 * The list fast path (list-fast-path.ts) lets a request through by the same two functions,
 * bearerToken and covers, and leaves every refusal to this middleware.
 */
export function requireScope(store: TokenStore | null, scope: Scope): RequestHandler {
  return (req, res, next) => {
    if (store === null) {
      next();
      return;
    }
    const token = bearerToken(req.headers.authorization);
    if (token === null) {
      next(
        new HttpError(
          401,
          'AUTH_REQUIRED',
          'This API needs the header Authorization: Bearer <token>',
          { 'WWW-Authenticate': 'Bearer realm="wg-peerd"' },
        ),
      );
      return;
    }
    const identity = store.identify(token);
    if (identity === null) {
      next(
        new HttpError(401, 'AUTH_INVALID', 'The bearer token is wrong', {
          'WWW-Authenticate': 'Bearer realm="wg-peerd", error="invalid_token"',
        }),
      );
      return;
    }
    // Named even when refused below: the request line then says which token was refused.
    const context = requestContextOf(res);
    if (context !== undefined) context.tokenName = identity.name;
    if (!covers(identity.scope, scope)) {
      next(
        new HttpError(
          403,
          'FORBIDDEN_READ_ONLY',
          `This token may only read: ${req.method} ${req.originalUrl.split('?')[0]} needs an ` +
            'admin token (--token-file)',
          { 'WWW-Authenticate': 'Bearer realm="wg-peerd", error="insufficient_scope"' },
        ),
      );
      return;
    }
    next();
  };
}
