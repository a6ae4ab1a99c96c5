/**
 * One plain HTTP request on a connection of its own (no keep-alive pool between tests): the
 * status, the body as text, and the body parsed as JSON on demand.
 */
import http from 'node:http';

export interface HttpReply {
  status: number;
  headers: http.IncomingHttpHeaders;
  text: string;
  json<T = Record<string, unknown>>(): T;
}

export function httpCall(
  port: number,
  method: string,
  path: string,
  options: { token?: string; body?: unknown; host?: string } = {},
): Promise<HttpReply> {
  const payload = options.body === undefined ? undefined : JSON.stringify(options.body);
  const headers: Record<string, string> = {};
  if (options.token !== undefined) headers.authorization = `Bearer ${options.token}`;
  if (payload !== undefined) headers['content-type'] = 'application/json';
  return new Promise((resolve, reject) => {
    const req = http.request(
      { host: options.host ?? '127.0.0.1', port, method, path, headers, agent: false },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => (text += chunk));
        res.on('end', () =>
          resolve({
            status: res.statusCode ?? 0,
            headers: res.headers,
            text,
            json: <T>() => JSON.parse(text) as T,
          }),
        );
      },
    );
    req.on('error', reject);
    req.end(payload);
  });
}
