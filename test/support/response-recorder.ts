/**
 * Records every response an app under test sends (method, path, status, headers, body), so the
 * OpenAPI test (test/unit/http/openapi.test.ts) can check the real responses of the API tests
 * against the document. Wrapping is transparent: the app answers exactly as it would alone.
 */
import type { IncomingMessage, RequestListener, ServerResponse } from 'node:http';

export interface RecordedResponse {
  method: string;
  /** The path without the query. */
  path: string;
  status: number;
  headers: Readonly<Record<string, unknown>>;
  /** The body bytes as sent (still compressed when Content-Encoding says so). */
  body: Buffer;
}

export const recordedResponses: RecordedResponse[] = [];

type Chunk = string | Uint8Array;

function bytesOf(chunk: unknown, encoding: unknown): Buffer | null {
  if (typeof chunk === 'string') {
    return Buffer.from(chunk, typeof encoding === 'string' ? (encoding as BufferEncoding) : 'utf8');
  }
  if (chunk instanceof Uint8Array) return Buffer.from(chunk);
  return null;
}

export function recording(app: RequestListener): RequestListener {
  return (req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    const write = res.write.bind(res) as (...args: unknown[]) => boolean;
    const end = res.end.bind(res) as (...args: unknown[]) => ServerResponse;
    res.write = ((chunk: Chunk, ...rest: unknown[]) => {
      const bytes = bytesOf(chunk, rest[0]);
      if (bytes) chunks.push(bytes);
      return write(chunk, ...rest);
    }) as typeof res.write;
    res.end = ((chunk?: unknown, ...rest: unknown[]) => {
      const bytes = typeof chunk === 'function' ? null : bytesOf(chunk, rest[0]);
      if (bytes) chunks.push(bytes);
      return end(chunk, ...rest);
    }) as typeof res.end;
    res.on('finish', () => {
      recordedResponses.push({
        method: req.method ?? 'GET',
        path: (req.url ?? '/').split('?')[0] ?? '/',
        status: res.statusCode,
        headers: res.getHeaders(),
        body: Buffer.concat(chunks),
      });
    });
    app(req, res);
  };
}
