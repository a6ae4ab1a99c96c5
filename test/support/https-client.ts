/**
 * An HTTPS client for the TLS tests (unit and kernel): one request, and what the connection it
 * went over looked like (the server certificate's fingerprint, the protocol, the cipher, whether
 * a keep-alive connection was reused). Also the two ways a client must fail: a handshake refused,
 * and plain HTTP sent to the HTTPS port.
 */
import https from 'node:https';
import net from 'node:net';
import type { TLSSocket } from 'node:tls';

export interface TlsClientOptions {
  /** PEM of the CA that signed the server's certificate (the client trusts only it). */
  ca: string;
  /** The client certificate and key (mutual TLS), PEM. */
  cert?: string;
  key?: string;
  minVersion?: https.RequestOptions['minVersion'];
  maxVersion?: https.RequestOptions['maxVersion'];
  ciphers?: string;
  /** A keep-alive agent to reuse connections; a connection of its own when absent. */
  agent?: https.Agent;
}

export interface HttpsReply {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  text: string;
  json<T = Record<string, unknown>>(): T;
  /** SHA-256 fingerprint of the certificate the server presented on this connection. */
  serverFingerprint: string;
  protocol: string | null;
  cipher: string;
  /** The request went over a connection an earlier request had opened. */
  reused: boolean;
}

export function httpsCall(
  host: string,
  port: number,
  method: string,
  path: string,
  options: TlsClientOptions & { token?: string; body?: unknown },
): Promise<HttpsReply> {
  const payload = options.body === undefined ? undefined : JSON.stringify(options.body);
  const headers: Record<string, string> = {};
  if (options.token !== undefined) headers.authorization = `Bearer ${options.token}`;
  if (payload !== undefined) headers['content-type'] = 'application/json';
  return new Promise((resolve, reject) => {
    const req = https.request(
      {
        host,
        port,
        method,
        path,
        headers,
        ca: options.ca,
        cert: options.cert,
        key: options.key,
        minVersion: options.minVersion,
        maxVersion: options.maxVersion,
        ciphers: options.ciphers,
        agent: options.agent ?? false,
      },
      (res) => {
        const socket = res.socket as TLSSocket;
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => (text += chunk));
        res.on('end', () =>
          resolve({
            status: res.statusCode ?? 0,
            headers: res.headers,
            text,
            json: <T>() => JSON.parse(text) as T,
            serverFingerprint: socket.getPeerCertificate().fingerprint256,
            protocol: socket.getProtocol(),
            cipher: socket.getCipher().name,
            reused: req.reusedSocket,
          }),
        );
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(payload);
  });
}

/** The error of a request that must fail (its code: a refused handshake, a reset...). */
export async function httpsFailure(
  host: string,
  port: number,
  path: string,
  options: TlsClientOptions & { token?: string },
): Promise<NodeJS.ErrnoException> {
  try {
    const reply = await httpsCall(host, port, 'GET', path, options);
    throw new Error(`expected the request to fail, got HTTP ${reply.status}: ${reply.text}`);
  } catch (error) {
    if (error instanceof Error && 'code' in error) return error as NodeJS.ErrnoException;
    throw error;
  }
}

/** Sends a plain-HTTP request to the port and returns every byte answered before it closed. */
export function plainHttpAnswer(host: string, port: number, token: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, host, () =>
      socket.write(
        `GET /api/peers HTTP/1.1\r\nHost: ${host}\r\nAuthorization: Bearer ${token}\r\n\r\n`,
      ),
    );
    let text = '';
    socket.setEncoding('latin1');
    socket.on('data', (chunk: string) => (text += chunk));
    socket.on('error', (error: NodeJS.ErrnoException) => {
      if (error.code !== 'ECONNRESET' && error.code !== 'EPIPE') reject(error);
    });
    socket.on('close', () => resolve(text));
    socket.setTimeout(30_000, () =>
      socket.destroy(new Error('the server neither answered nor closed')),
    );
  });
}
