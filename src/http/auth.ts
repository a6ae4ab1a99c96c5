/**
 * Bearer tokens with two scopes (DESIGN §3): admin tokens may do everything, read tokens may only
 * list peers and read metrics. Only SHA-256 digests of the tokens are kept, and a given token is
 * compared with every one of them in constant time, so neither the comparison nor the number of
 * comparisons depends on which token (if any) matched.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type { RequestHandler } from 'express';
import { HttpError } from './errors';

export type Scope = 'read' | 'admin';

function digest(text: string): Buffer {
  return createHash('sha256').update(text, 'utf8').digest();
}

export function tokenMatches(given: string, expectedDigest: Buffer): boolean {
  return timingSafeEqual(digest(given), expectedDigest);
}

export interface ScopedTokens {
  admin: readonly string[];
  read: readonly string[];
}

/** The accepted tokens, swapped as a whole on SIGHUP (`replace`). */
export class TokenStore {
  private admin: Buffer[] = [];
  private read: Buffer[] = [];

  constructor(tokens: ScopedTokens) {
    this.replace(tokens);
  }

  /** Installs a new set; requests that arrive afterwards see only the new tokens. */
  replace(tokens: ScopedTokens): void {
    this.admin = tokens.admin.map(digest);
    this.read = tokens.read.map(digest);
  }

  counts(): { admin: number; read: number } {
    return { admin: this.admin.length, read: this.read.length };
  }

  /** The token's scope, or null for an unknown token. */
  scopeOf(token: string): Scope | null {
    const given = digest(token);
    let admin = false;
    let read = false;
    // No early exit: every digest is compared whatever matches.
    for (const d of this.admin) admin = timingSafeEqual(given, d) || admin;
    for (const d of this.read) read = timingSafeEqual(given, d) || read;
    return admin ? 'admin' : read ? 'read' : null;
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
  return (req, _res, next) => {
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
    const granted = store.scopeOf(token);
    if (granted === null) {
      next(
        new HttpError(401, 'AUTH_INVALID', 'The bearer token is wrong', {
          'WWW-Authenticate': 'Bearer realm="wg-peerd", error="invalid_token"',
        }),
      );
      return;
    }
    if (!covers(granted, scope)) {
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
