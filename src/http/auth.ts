/** Bearer-token authentication, compared in constant time over equal-length digests. */
import { createHash, timingSafeEqual } from 'node:crypto';
import type { RequestHandler } from 'express';
import { HttpError } from './errors';

function digest(text: string): Buffer {
  return createHash('sha256').update(text, 'utf8').digest();
}

export function tokenMatches(given: string, expectedDigest: Buffer): boolean {
  return timingSafeEqual(digest(given), expectedDigest);
}

export function bearerAuth(token: string): RequestHandler {
  const expected = digest(token);
  return (req, _res, next) => {
    const header = req.headers.authorization;
    const match = header === undefined ? null : /^Bearer +(\S+) *$/i.exec(header);
    if (match === null || match[1] === undefined) {
      next(
        new HttpError(
          401,
          'AUTH_REQUIRED',
          'This API needs the header Authorization: Bearer <token>',
          {
            'WWW-Authenticate': 'Bearer realm="wg-peerd"',
          },
        ),
      );
      return;
    }
    if (!tokenMatches(match[1], expected)) {
      next(
        new HttpError(401, 'AUTH_INVALID', 'The bearer token is wrong', {
          'WWW-Authenticate': 'Bearer realm="wg-peerd", error="invalid_token"',
        }),
      );
      return;
    }
    next();
  };
}
