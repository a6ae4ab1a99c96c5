/**
 * HTTPS for the API (issue 22): the server's TLS options from the checked files of
 * src/tls-files.ts, the certificate swap of SIGHUP, the subject of a client certificate for the
 * change log lines, and the certificate's expiry for GET /metrics.
 *
 * With a client CA the server asks every client for a certificate and refuses the handshake to
 * one without a certificate that CA signed (`requestCert` + `rejectUnauthorized`): under TLS 1.3
 * the client learns it from a `certificate_required` alert (RFC 8446 §4.4.2.4), under TLS 1.2
 * from a `handshake_failure`. Bearer tokens still apply on top.
 */
import type http from 'node:http';
import type https from 'node:https';
import type net from 'node:net';
import { TLSSocket } from 'node:tls';
import { Gauge, type Registry } from 'prom-client';
import {
  oneLineSubject,
  secureContextOptions,
  type CertificateSummary,
  type TlsMaterial,
} from '../tls-files';

/** The API's server: plain HTTP, or HTTPS when TLS files are given. */
export type ApiServer = http.Server | https.Server;

/**
 * `https.createServer` options (beside the HTTP ones) for `material`. `handshakeTimeoutMs`
 * bounds a handshake as the header timeout bounds the headers: Node's default, 120 s, would let
 * a client that never finishes one hold a connection twelve times as long as a slow header.
 */
export function httpsServerOptions(
  material: TlsMaterial,
  handshakeTimeoutMs: number,
): https.ServerOptions {
  const mutual = material.ca !== undefined;
  return {
    ...secureContextOptions(material),
    requestCert: mutual,
    rejectUnauthorized: mutual,
    handshakeTimeout: handshakeTimeoutMs,
  };
}

/**
 * What SIGHUP does to a running HTTPS server: connections from now on get `material`'s
 * certificate, key and client CA; connections already open keep theirs and are not cut.
 */
export function replaceCertificate(server: https.Server, material: TlsMaterial): void {
  server.setSecureContext(secureContextOptions(material));
}

/**
 * The subject of the client certificate on a request's connection ("O=billing, CN=panel-1"), or
 * null: plain HTTP, or TLS without mutual authentication.
 */
export function clientCertificateSubject(socket: net.Socket): string | null {
  if (!(socket instanceof TLSSocket)) return null;
  const certificate = socket.getPeerX509Certificate();
  return certificate === undefined ? null : oneLineSubject(certificate.subject);
}

export const TLS_EXPIRY_METRIC = 'wg_peerd_tls_certificate_expiry_timestamp_seconds';

/**
 * `wg_peerd_tls_certificate_expiry_timestamp_seconds`: the served certificate's notAfter, as
 * seconds since the epoch, read at each scrape (a SIGHUP's new certificate shows at once). An
 * alert on `... - time() < 14 * 86400` fires two weeks before the certificate lapses.
 */
export function registerTlsMetrics(
  registry: Registry,
  certificate: () => CertificateSummary,
): void {
  new Gauge({
    name: TLS_EXPIRY_METRIC,
    help: 'When the TLS certificate served on --listen expires, in seconds since the epoch.',
    registers: [registry],
    collect() {
      this.set(certificate().notAfter.getTime() / 1000);
    },
  });
}
