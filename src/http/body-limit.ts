/**
 * The request body limit (issue 10): an announced length over it is refused before reading
 * (src/http/server.ts), and a chunked body is cut as soon as it passes it. Express's body
 * parser alone does neither: on the limit it reads the rest of the body before answering.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { RequestHandler } from 'express';
import { HttpError, toErrorResponse } from './errors';

/** Largest accepted request body by default: bodies here are small JSON objects. */
export const DEFAULT_BODY_LIMIT_BYTES = 4096;

export function bodyTooLarge(limitBytes: number): HttpError {
  return new HttpError(
    413,
    'BODY_TOO_LARGE',
    `The request body is too large; bodies here are small JSON objects of at most ${limitBytes} bytes`,
  );
}

/** Content-Length over the limit. Node's parser has already refused a malformed one. */
export function announcedTooLarge(req: IncomingMessage, limitBytes: number): boolean {
  const length = req.headers['content-length'];
  return length !== undefined && Number(length) > limitBytes;
}

/** Answers 413 and closes the connection, leaving the rest of the body unread. */
export function refuseBody(res: ServerResponse, limitBytes: number): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  const { status, body } = toErrorResponse(bodyTooLarge(limitBytes));
  const text = JSON.stringify(body);
  // Connection: close makes Node close the socket after the answer instead of reading the
  // rest of the body (up to 100 MB) to reach a next request.
  res.writeHead(status, {
    'Content-Type': 'application/json; charset=utf-8',
    'Content-Length': Buffer.byteLength(text),
    Connection: 'close',
  });
  res.end(text);
}

/**
 * Wraps the body parser: counts the bytes of a body without a Content-Length (chunked) and
 * answers 413 the moment they pass the limit. Closing the socket also ends the parser's wait
 * for the body's end; its own 413 that follows is dropped (the answer is out already). The
 * 'data' listener is added in the same tick as the parser's, so both see every chunk.
 */
export function cutLongBodies(limitBytes: number, parser: RequestHandler): RequestHandler {
  return (req, res, next) => {
    let refused = false;
    if (
      req.headers['content-length'] === undefined &&
      req.headers['transfer-encoding'] !== undefined
    ) {
      let received = 0;
      const count = (chunk: Buffer): void => {
        received += chunk.length;
        if (received > limitBytes) {
          req.off('data', count);
          refused = true;
          refuseBody(res, limitBytes);
        }
      };
      req.on('data', count);
    }
    parser(req, res, (error?: unknown) => {
      if (!refused) next(error);
    });
  };
}
