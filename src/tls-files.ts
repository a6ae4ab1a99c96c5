/**
 * TLS files (issue 22): the certificate, its private key and the CA of client certificates, read
 * and checked the same way at start and on every SIGHUP re-read, so a file that would fail the
 * handshake is refused with one line instead of being served.
 *
 * - `--tls-cert`: PEM, the server's certificate first, then any intermediates (a chain file, as
 *   certbot's fullchain.pem). Public: any file mode.
 * - `--tls-key`: PEM, the certificate's private key, unencrypted (a daemon cannot type a
 *   passphrase). Refused when group or others may read it, as token files are.
 * - `--tls-client-ca`: PEM, one or more CA certificates; a client must present a certificate one
 *   of them signed (mutual TLS). Public: any file mode.
 *
 * The files are read with the token files' reader (one open file: content and mode without a
 * race), so tests hand both the same in-memory files.
 */
import { X509Certificate, createPrivateKey, type KeyObject } from 'node:crypto';
import { createSecureContext } from 'node:tls';
import {
  exposedFileReason,
  unreadableReason,
  type ReadTokenFile,
  type TokenFileContent,
} from './token-files';

/** Where the TLS files are; `clientCa` null: no client certificate is asked for. */
export interface TlsSources {
  cert: string;
  key: string;
  clientCa: string | null;
}

/** The flags that name the files, for messages (the variables name the same files). */
export const TLS_FLAGS = {
  cert: '--tls-cert',
  key: '--tls-key',
  clientCa: '--tls-client-ca',
} as const;

/** What the files hold, checked: ready for `tls.createServer` and `server.setSecureContext`. */
export interface TlsMaterial {
  cert: string;
  key: string;
  /** PEM of the client CAs; absent without mutual TLS. */
  ca?: string;
  /** The server certificate (the first of --tls-cert), for logs and the expiry metric. */
  certificate: CertificateSummary;
}

export interface CertificateSummary {
  /** The subject as OpenSSL prints it, one attribute after the other: "CN=vpn1.example.net". */
  subject: string;
  /** End of validity. */
  notAfter: Date;
  /** SHA-256 of the DER certificate, colon-separated hex (what `openssl x509 -fingerprint -sha256` says). */
  fingerprint256: string;
}

/** A TLS file that must not be used; the message is one line naming the flag and the path. */
export class TlsFileError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'TlsFileError';
  }
}

const PEM_CERTIFICATE = /-----BEGIN CERTIFICATE-----[\s\S]*?-----END CERTIFICATE-----/g;
/** PKCS#8 `ENCRYPTED PRIVATE KEY` blocks and the traditional `Proc-Type: 4,ENCRYPTED` header. */
const PEM_ENCRYPTED = /-----BEGIN ENCRYPTED PRIVATE KEY-----|Proc-Type:\s*4,ENCRYPTED/;
const PEM_PRIVATE_KEY = /-----BEGIN (?:[A-Z]+ )?PRIVATE KEY-----/;

/** One line of an OpenSSL subject ("C=DE\nCN=x" → "C=DE, CN=x"). */
export function oneLineSubject(subject: string): string {
  return subject.split('\n').join(', ');
}

function readFile(path: string, where: string, read: ReadTokenFile): TokenFileContent {
  try {
    return read(path);
  } catch (error) {
    throw new TlsFileError(unreadableReason(error, where));
  }
}

/** Every certificate of a PEM text, parsed; at least one, or a TlsFileError. */
function certificatesOf(text: string, where: string): X509Certificate[] {
  const blocks = text.match(PEM_CERTIFICATE) ?? [];
  if (blocks.length === 0) {
    throw new TlsFileError(
      `${where} holds no PEM certificate (a "-----BEGIN CERTIFICATE-----" block)`,
    );
  }
  return blocks.map((block, index) => {
    try {
      return new X509Certificate(block);
    } catch (error) {
      throw new TlsFileError(
        `${where}: certificate ${index + 1} cannot be parsed (${openSslReason(error)})`,
      );
    }
  });
}

function privateKeyOf(text: string, where: string): KeyObject {
  if (PEM_ENCRYPTED.test(text)) {
    throw new TlsFileError(
      `${where} is encrypted; the daemon needs it without a passphrase ` +
        '(openssl pkey -in encrypted.key -out plain.key, then chmod 600 plain.key)',
    );
  }
  if (!PEM_PRIVATE_KEY.test(text)) {
    throw new TlsFileError(
      `${where} holds no PEM private key (a "-----BEGIN PRIVATE KEY-----" block)`,
    );
  }
  try {
    return createPrivateKey(text);
  } catch (error) {
    throw new TlsFileError(`${where}: the private key cannot be parsed (${openSslReason(error)})`);
  }
}

/** OpenSSL's own words ("key values mismatch"), without its "error:0A00018E:SSL routines::" prefix. */
function openSslReason(error: unknown): string {
  const message = error instanceof Error ? error.message : String(error);
  return message.replace(/^error:[0-9A-F]+:[^:]*:[^:]*:/, '').trim() || message;
}

function summary(certificate: X509Certificate): CertificateSummary {
  return {
    subject: oneLineSubject(certificate.subject),
    notAfter: new Date(certificate.validTo),
    fingerprint256: certificate.fingerprint256,
  };
}

/**
 * Reads and checks the three files; throws TlsFileError (one line, naming the flag and path) at
 * the first problem. Checked: each file readable; the key private to the daemon's user,
 * unencrypted, and the key of the first certificate; every certificate parseable; each client CA
 * certificate a CA; and OpenSSL takes the whole (`tls.createSecureContext`, which also refuses
 * keys its security level calls too weak).
 */
export function loadTlsFiles(sources: TlsSources, read: ReadTokenFile): TlsMaterial {
  const where = {
    cert: `${TLS_FLAGS.cert} ${sources.cert}`,
    key: `${TLS_FLAGS.key} ${sources.key}`,
    clientCa: `${TLS_FLAGS.clientCa} ${sources.clientCa ?? ''}`,
  };
  const certFile = readFile(sources.cert, where.cert, read);
  const keyFile = readFile(sources.key, where.key, read);
  const exposed = exposedFileReason(keyFile.mode, where.key);
  if (exposed !== null) throw new TlsFileError(exposed);

  const [leaf] = certificatesOf(certFile.text, where.cert);
  const key = privateKeyOf(keyFile.text, where.key);
  if (!leaf!.checkPrivateKey(key)) {
    throw new TlsFileError(
      `${where.key} is not the key of the certificate in ${where.cert} ` +
        `(${oneLineSubject(leaf!.subject)})`,
    );
  }

  let ca: string | undefined;
  if (sources.clientCa !== null) {
    ca = readFile(sources.clientCa, where.clientCa, read).text;
    for (const authority of certificatesOf(ca, where.clientCa)) {
      if (!authority.ca) {
        throw new TlsFileError(
          `${where.clientCa} holds ${oneLineSubject(authority.subject)}, which is not a CA ` +
            'certificate: give the certificate of the CA that signs the clients’ certificates',
        );
      }
    }
  }

  const material: TlsMaterial = {
    cert: certFile.text,
    key: keyFile.text,
    ...(ca === undefined ? {} : { ca }),
    certificate: summary(leaf!),
  };
  try {
    createSecureContext(secureContextOptions(material));
  } catch (error) {
    throw new TlsFileError(
      `${where.cert} with ${where.key}: OpenSSL refuses them (${openSslReason(error)})`,
    );
  }
  return material;
}

/**
 * TLS 1.2 at least; TLS 1.3 is chosen whenever the client speaks it (OpenSSL negotiates the
 * highest version both sides have). TLS 1.3's suites are all AEAD and stay OpenSSL's defaults;
 * for TLS 1.2 only ECDHE key exchange (forward secrecy) with AEAD ciphers: the TLS 1.2 list of
 * Mozilla's "intermediate" server configuration (wiki.mozilla.org/Security/Server_Side_TLS,
 * version 5.7) without its DHE suites, which would need a DH parameters file. No CBC, RC4, 3DES,
 * static RSA key exchange or SHA-1 MACs.
 */
export const TLS_PROTOCOL = {
  minVersion: 'TLSv1.2',
  ciphers: [
    'ECDHE-ECDSA-AES128-GCM-SHA256',
    'ECDHE-RSA-AES128-GCM-SHA256',
    'ECDHE-ECDSA-AES256-GCM-SHA384',
    'ECDHE-RSA-AES256-GCM-SHA384',
    'ECDHE-ECDSA-CHACHA20-POLY1305',
    'ECDHE-RSA-CHACHA20-POLY1305',
  ].join(':'),
  honorCipherOrder: true,
} as const;

/** The options of `tls.createSecureContext` (and `server.setSecureContext`) for the material. */
export function secureContextOptions(material: TlsMaterial): {
  cert: string;
  key: string;
  ca?: string;
  minVersion: 'TLSv1.2';
  ciphers: string;
  honorCipherOrder: boolean;
} {
  return {
    ...TLS_PROTOCOL,
    cert: material.cert,
    key: material.key,
    ...(material.ca === undefined ? {} : { ca: material.ca }),
  };
}

/** A warning for a certificate that clients will refuse by its dates, else null. */
export function validityWarning(certificate: CertificateSummary, now: Date): string | null {
  if (certificate.notAfter.getTime() > now.getTime()) return null;
  return (
    `the TLS certificate (${certificate.subject}) expired at ` +
    `${certificate.notAfter.toISOString()}: clients that check it refuse the connection`
  );
}
