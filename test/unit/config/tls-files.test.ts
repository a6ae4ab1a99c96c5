import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import { chmodSync, copyFileSync, mkdirSync, writeFileSync } from 'node:fs';
import { TlsFileError, loadTlsFiles, type TlsSources } from '../../../src/tls-files';
import { readTokenFileFromDisk } from '../../../src/token-files';
import { TestPki } from '../../support/pki';

// Issue 22: the TLS files are checked at start (and on every SIGHUP re-read) so that a file the
// handshake would fail on is refused with one line naming the flag and the file. Real files with
// real modes, made by the openssl command line.
describe('TLS files: what --tls-cert, --tls-key and --tls-client-ca may hold', function () {
  this.timeout(60_000);
  const pki = new TestPki();
  const ca = pki.ca('clients-ca');
  const server = pki.issue(ca, 'server', '/CN=vpn1.example.net', 'server');
  const client = pki.issue(ca, 'client', '/O=billing/CN=panel-1', 'client');
  const other = pki.issue(ca, 'other', '/CN=other.example.net', 'server');

  const sources = (overrides: Partial<TlsSources> = {}): TlsSources => ({
    cert: server.cert,
    key: server.key,
    clientCa: null,
    ...overrides,
  });
  /** A file in the PKI directory with the given text and mode (chmod: not subject to umask). */
  const file = (name: string, text: string, mode = 0o600): string => {
    const target = pki.file(name);
    writeFileSync(target, text);
    chmodSync(target, mode);
    return target;
  };
  const load = (s: TlsSources) => loadTlsFiles(s, readTokenFileFromDisk);

  it('loads a certificate and its key, with the subject, expiry and fingerprint openssl reads', () => {
    const material = load(sources());
    expect(material.cert).to.equal(pki.read(server.cert));
    expect(material.key).to.equal(pki.read(server.key));
    expect(material.ca).to.equal(undefined);
    expect(material.certificate).to.deep.equal({
      subject: 'CN=vpn1.example.net',
      notAfter: pki.notAfter(server.cert),
      fingerprint256: pki.fingerprint(server.cert),
    });
  });

  it('loads the client CA for mutual TLS, and a chain file whose first certificate is the key’s', () => {
    const chain = file('chain.pem', pki.read(server.cert) + pki.read(ca.cert), 0o644);
    const material = load(sources({ cert: chain, clientCa: ca.cert }));
    expect(material.ca).to.equal(pki.read(ca.cert));
    expect(material.certificate.subject).to.equal('CN=vpn1.example.net');
  });

  it('takes a key of mode 0400 (read-only for its owner)', () => {
    const key = pki.file('readonly.key');
    copyFileSync(server.key, key);
    chmodSync(key, 0o400);
    expect(load(sources({ key })).certificate.subject).to.equal('CN=vpn1.example.net');
  });

  const refusals: Array<[string, () => Partial<TlsSources>, RegExp]> = [
    [
      'a missing certificate file',
      () => ({ cert: pki.file('absent.pem') }),
      /^--tls-cert \S+absent\.pem cannot be read \(ENOENT\)$/,
    ],
    [
      'a key path that is a directory',
      () => {
        mkdirSync(pki.file('key-dir'), { recursive: true });
        return { key: pki.file('key-dir') };
      },
      /^--tls-key \S+key-dir cannot be read \(EISDIR\)$/,
    ],
    [
      'a missing client CA file',
      () => ({ clientCa: pki.file('absent-ca.pem') }),
      /^--tls-client-ca \S+absent-ca\.pem cannot be read \(ENOENT\)$/,
    ],
    [
      'a key others may read (0644)',
      () => ({ key: file('open.key', pki.read(server.key), 0o644) }),
      /^--tls-key \S+open\.key may be read by group or others \(mode 0644\): chmod 600 it/,
    ],
    [
      'a key its group may read (0640)',
      () => ({ key: file('group.key', pki.read(server.key), 0o640) }),
      /^--tls-key \S+group\.key may be read by group or others \(mode 0640\)/,
    ],
    [
      'a certificate file without a PEM certificate',
      () => ({ cert: file('text.pem', 'not a certificate\n', 0o644) }),
      /^--tls-cert \S+text\.pem holds no PEM certificate/,
    ],
    [
      'a certificate whose base64 is broken',
      () => ({
        cert: file(
          'broken.pem',
          '-----BEGIN CERTIFICATE-----\nnot*base64\n-----END CERTIFICATE-----\n',
          0o644,
        ),
      }),
      /^--tls-cert \S+broken\.pem: certificate 1 cannot be parsed \(bad base64 decode\)$/,
    ],
    [
      'a certificate given as the key',
      () => ({ key: file('cert-as-key.pem', pki.read(server.cert)) }),
      /^--tls-key \S+cert-as-key\.pem holds no PEM private key/,
    ],
    [
      'a key whose content is damaged',
      () => ({
        key: file('damaged.key', '-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n'),
      }),
      /^--tls-key \S+damaged\.key: the private key cannot be parsed \(/,
    ],
    [
      'the key of another certificate',
      () => ({ key: other.key }),
      /^--tls-key \S+other\.key is not the key of the certificate in --tls-cert \S+server\.pem \(CN=vpn1\.example\.net\)$/,
    ],
    [
      'an encrypted key',
      () => {
        const key = pki.file('encrypted.key');
        execFileSync('openssl', [
          'pkey',
          '-in',
          server.key,
          '-aes256',
          '-passout',
          'pass:secret',
          '-out',
          key,
        ]);
        chmodSync(key, 0o600);
        return { key };
      },
      /^--tls-key \S+encrypted\.key is encrypted; the daemon needs it without a passphrase/,
    ],
    [
      'a client certificate given as the client CA',
      () => ({ clientCa: client.cert }),
      /^--tls-client-ca \S+client\.pem holds O=billing, CN=panel-1, which is not a CA certificate/,
    ],
    [
      'a client CA file without a certificate',
      () => ({ clientCa: file('empty-ca.pem', '', 0o644) }),
      /^--tls-client-ca \S+empty-ca\.pem holds no PEM certificate/,
    ],
  ];
  for (const [what, change, message] of refusals) {
    it(`refuses ${what}, in one line`, () => {
      const s = sources(change());
      expect(() => load(s))
        .to.throw(TlsFileError)
        .that.satisfies((error: Error) => !error.message.includes('\n'))
        .and.has.property('message')
        .that.matches(message);
    });
  }
});
