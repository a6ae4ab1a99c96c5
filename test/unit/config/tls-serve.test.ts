import { expect } from 'chai';
import { chmodSync, copyFileSync, writeFileSync } from 'node:fs';
import https from 'node:https';
import { startDaemon, type Daemon } from '../../../src/main';
import { loadTlsFiles, type TlsSources } from '../../../src/tls-files';
import { readTokenFileFromDisk } from '../../../src/token-files';
import { httpsCall, httpsFailure, plainHttpAnswer } from '../../support/https-client';
import { TestPki, type KeyPairFiles } from '../../support/pki';
import { testConfig } from '../support/config';
import { FakeKernel } from '../support/fake-kernel';
import { captureLog, type CapturedLog } from '../support/log-capture';

const ADMIN = 'tls-admin-token-0123456789abcdef';

/** The first log line that `match`es, waiting up to 5 s for it to be written. */
async function lineOf(
  log: CapturedLog,
  match: (line: Record<string, unknown>) => boolean,
): Promise<Record<string, unknown> | undefined> {
  for (let waited = 0; waited < 5000; waited += 10) {
    const line = log.lines().find(match);
    if (line !== undefined) return line;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  return undefined;
}
const HOST = '127.0.0.1';

// Issue 22, in process over real loopback TLS: HTTPS on --listen, mutual TLS on top of tokens,
// and what SIGHUP does to the certificate (daemon.reloadTls() is exactly what the handler calls).
describe('HTTPS and mutual TLS (issue 22)', function () {
  this.timeout(60_000);
  const pki = new TestPki();
  const ca = pki.ca('tls-ca');
  const otherCa = pki.ca('other-ca');
  const server = pki.issue(ca, 'server', '/CN=vpn1.example.net', 'server');
  const client = pki.issue(ca, 'client', '/O=billing/CN=panel-1', 'client');
  const stranger = pki.issue(otherCa, 'stranger', '/CN=stranger', 'client');
  // The files the daemon is pointed at; the tests replace their content.
  const live: TlsSources = {
    cert: pki.file('live.pem'),
    key: pki.file('live.key'),
    clientCa: pki.file('live-ca.pem'),
  };
  /** Puts `pair` (and the CA) into the live files, as an operator's renewal would. */
  const install = (pair: KeyPairFiles): void => {
    copyFileSync(pair.cert, live.cert);
    copyFileSync(pair.key, live.key);
    chmodSync(live.key, 0o600);
    copyFileSync(ca.cert, live.clientCa!);
  };
  const trust = pki.read(ca.cert);
  const asClient = { ca: trust, cert: pki.read(client.cert), key: pki.read(client.key) };

  let daemon: Daemon | undefined;
  afterEach(async () => {
    await daemon?.shutdown();
    daemon = undefined;
  });

  async function start(
    sources: TlsSources | null,
    host = HOST,
    now?: () => Date,
  ): Promise<CapturedLog> {
    const log = captureLog();
    const tls =
      sources === null ? null : { sources, material: loadTlsFiles(sources, readTokenFileFromDisk) };
    daemon = await startDaemon(
      testConfig({
        listen: { host, port: 0 },
        tokens: { admin: [ADMIN], read: [] },
        tls,
      }),
      { openKernel: async () => FakeKernel.withInterface(), logger: log.logger, now },
    );
    return log;
  }
  const port = (): number => daemon!.address.port;

  it('lists and creates peers over HTTPS for a client with a certificate from the CA and a token', async () => {
    install(server);
    const log = await start(live);
    const list = await httpsCall(HOST, port(), 'GET', '/api/peers', { ...asClient, token: ADMIN });
    expect(list.status).to.equal(200);
    expect(list.json()).to.include({ success: true, total_count: 0 });
    expect(list.serverFingerprint).to.equal(pki.fingerprint(server.cert));
    const created = await httpsCall(HOST, port(), 'POST', '/api/peer', {
      ...asClient,
      token: ADMIN,
    });
    expect(created.status).to.equal(201);
    expect(created.json()).to.include({ success: true });

    // The change line names the client certificate beside the request id and the token.
    const change = log.lines().find((l) => l['event'] === 'peer_created');
    expect(change).to.include({
      clientCertificate: 'O=billing, CN=panel-1',
      requestId: created.headers['x-request-id'],
    });
    expect(change?.['tokenName']).to.match(/^sha256:[0-9a-f]{8}$/);
    // The request line is written when the server closes the response, which may come after
    // the client has read all of it.
    const post = await lineOf(log, (l) => l['msg'] === 'request' && l['method'] === 'POST');
    expect(post).to.include({ clientCertificate: 'O=billing, CN=panel-1', status: 201 });

    const listening = log.lines().find((l) => l['msg'] === 'wg-peerd is serving');
    expect(listening).to.include({
      tls: 'mutual',
      certificateSubject: 'CN=vpn1.example.net',
      certificateSha256: pki.fingerprint(server.cert),
    });
    expect(log.lines().some((l) => l['event'] === 'plain_http')).to.equal(false);
  });

  it('still asks for the token: a client certificate alone gets 401', async () => {
    install(server);
    await start(live);
    const reply = await httpsCall(HOST, port(), 'GET', '/api/peers', asClient);
    expect(reply.status).to.equal(401);
  });

  it('refuses the handshake to a client without a certificate, or with one of another CA, and logs it', async () => {
    install(server);
    const log = await start(live);
    // The client reads the server's alert (TLS 1.3: certificate_required, RFC 8446 §4.4.2.4;
    // unknown_ca for a foreign issuer), or the reset that follows it when the close wins the
    // race; the server's log line says why in every case.
    const none = await httpsFailure(HOST, port(), '/api/peers', { ca: trust, token: ADMIN });
    expect(none.code).to.match(/^(ERR_SSL_TLSV13_ALERT_CERTIFICATE_REQUIRED|ECONNRESET)$/);
    const foreign = await httpsFailure(HOST, port(), '/api/peers', {
      ca: trust,
      cert: pki.read(stranger.cert),
      key: pki.read(stranger.key),
      token: ADMIN,
    });
    expect(foreign.code).to.match(/^(ERR_SSL_TLSV1_ALERT_UNKNOWN_CA|ECONNRESET)$/);
    const oldClient = await httpsFailure(HOST, port(), '/api/peers', {
      ca: trust,
      maxVersion: 'TLSv1.2',
      token: ADMIN,
    });
    expect(oldClient.code).to.match(/^(EPROTO|ECONNRESET|ERR_SSL_SSLV3_ALERT_HANDSHAKE_FAILURE)$/);
    const refused = log.lines().filter((l) => l['msg'] === 'TLS handshake refused');
    expect(refused.map((l) => l['code'])).to.have.members([
      'ERR_SSL_PEER_DID_NOT_RETURN_A_CERTIFICATE',
      // OpenSSL's X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE: no trusted issuer for the
      // certificate (/usr/include/openssl/x509_vfy.h).
      'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
      'ERR_SSL_PEER_DID_NOT_RETURN_A_CERTIFICATE',
    ]);
  });

  it('gives plain HTTP to the port no API answer', async () => {
    install(server);
    await start(live);
    expect(await plainHttpAnswer(HOST, port(), ADMIN)).to.equal('');
  });

  it('speaks TLS 1.3 when the client can, TLS 1.2 with ECDHE and AEAD only, nothing older', async () => {
    install(server);
    await start({ ...live, clientCa: null });
    const modern = await httpsCall(HOST, port(), 'GET', '/healthz', { ca: trust });
    expect(modern.status).to.equal(200);
    expect(modern.protocol).to.equal('TLSv1.3');

    const tls12 = await httpsCall(HOST, port(), 'GET', '/healthz', {
      ca: trust,
      maxVersion: 'TLSv1.2',
    });
    expect(tls12.protocol).to.equal('TLSv1.2');
    expect(tls12.cipher).to.match(
      /^ECDHE-ECDSA-(AES(128|256)-GCM-SHA(256|384)|CHACHA20-POLY1305)$/,
    );

    // A TLS 1.2 client offering only legacy suites (CBC with SHA-1 MACs, static RSA).
    const legacy = await httpsFailure(HOST, port(), '/healthz', {
      ca: trust,
      maxVersion: 'TLSv1.2',
      ciphers: 'ECDHE-ECDSA-AES128-SHA:AES128-SHA:AES256-SHA',
    });
    expect(legacy.code).to.match(/HANDSHAKE_FAILURE|EPROTO/);
    const tls11 = await httpsFailure(HOST, port(), '/healthz', {
      ca: trust,
      minVersion: 'TLSv1',
      maxVersion: 'TLSv1.1',
      ciphers: 'DEFAULT:@SECLEVEL=0',
    });
    expect(tls11.code).to.match(/PROTOCOL_VERSION|UNSUPPORTED_PROTOCOL|EPROTO/);
  });

  it('serves /healthz and /readyz on the HTTPS listener (with a client certificate under mutual TLS)', async () => {
    install(server);
    await start(live);
    expect((await httpsCall(HOST, port(), 'GET', '/healthz', asClient)).status).to.equal(200);
    expect((await httpsCall(HOST, port(), 'GET', '/readyz', asClient)).status).to.equal(200);
  });

  it('exports the certificate expiry openssl reads as wg_peerd_tls_certificate_expiry_timestamp_seconds', async () => {
    install(server);
    await start(live);
    const text = (await httpsCall(HOST, port(), 'GET', '/metrics', { ...asClient, token: ADMIN }))
      .text;
    const line = text
      .split('\n')
      .find((l) => l.startsWith('wg_peerd_tls_certificate_expiry_timestamp_seconds '));
    expect(Number(line?.split(' ')[1])).to.equal(pki.notAfter(server.cert).getTime() / 1000);
    expect(text).to.contain('# TYPE wg_peerd_tls_certificate_expiry_timestamp_seconds gauge');
  });

  it('on SIGHUP serves a replaced certificate to new connections, keeps open ones, and updates the metric', async () => {
    install(server);
    const log = await start(live);
    const agent = new https.Agent({ keepAlive: true, maxSockets: 1 });
    try {
      const before = await httpsCall(HOST, port(), 'GET', '/healthz', { ...asClient, agent });
      expect(before.serverFingerprint).to.equal(pki.fingerprint(server.cert));

      const renewed = pki.issue(ca, 'renewed', '/CN=vpn1.example.net', 'server', 30);
      install(renewed);
      expect(daemon!.reloadTls()).to.equal(true);

      const fresh = await httpsCall(HOST, port(), 'GET', '/api/peers', {
        ...asClient,
        token: ADMIN,
      });
      expect(fresh.status).to.equal(200);
      expect(fresh.serverFingerprint).to.equal(pki.fingerprint(renewed.cert));
      // The keep-alive connection opened before the re-read still works, with the old certificate.
      const kept = await httpsCall(HOST, port(), 'GET', '/api/peers', {
        ...asClient,
        agent,
        token: ADMIN,
      });
      expect(kept).to.include({ status: 200, reused: true });
      expect(kept.serverFingerprint).to.equal(pki.fingerprint(server.cert));

      const metrics = await httpsCall(HOST, port(), 'GET', '/metrics', {
        ...asClient,
        token: ADMIN,
      });
      expect(metrics.text).to.contain(
        `wg_peerd_tls_certificate_expiry_timestamp_seconds ${pki.notAfter(renewed.cert).getTime() / 1000}\n`,
      );
      const reloaded = log.lines().find((l) => l['event'] === 'tls_reloaded');
      expect(reloaded).to.include({ level: 30, certificateSha256: pki.fingerprint(renewed.cert) });
    } finally {
      agent.destroy();
    }
  });

  const badFiles: Array<[string, () => void, RegExp]> = [
    [
      'a certificate file that holds no certificate',
      () => writeFileSync(live.cert, 'half-written\n'),
      /^--tls-cert \S+live\.pem holds no PEM certificate/,
    ],
    [
      'a key others may read',
      () => chmodSync(live.key, 0o644),
      /^--tls-key \S+live\.key may be read by group or others \(mode 0644\)/,
    ],
    [
      'a new certificate without its new key',
      () => copyFileSync(client.cert, live.cert),
      /^--tls-key \S+live\.key is not the key of the certificate in --tls-cert/,
    ],
    [
      'a client CA file replaced by a client certificate',
      () => copyFileSync(client.cert, live.clientCa!),
      /^--tls-client-ca \S+ holds O=billing, CN=panel-1, which is not a CA certificate/,
    ],
  ];
  for (const [what, breakIt, reason] of badFiles) {
    it(`keeps the old certificate after ${what}, and logs why at warn`, async () => {
      install(server);
      const log = await start(live);
      breakIt();
      expect(daemon!.reloadTls()).to.equal(false);
      const after = await httpsCall(HOST, port(), 'GET', '/api/peers', {
        ...asClient,
        token: ADMIN,
      });
      expect(after.status).to.equal(200);
      expect(after.serverFingerprint).to.equal(pki.fingerprint(server.cert));
      const failed = log.lines().find((l) => l['event'] === 'tls_reload_failed');
      expect(failed?.['level']).to.equal(40);
      expect(String(failed?.['reason'])).to.match(reason);
    });
  }

  it('starts with an expired certificate (clients decide), and warns', async () => {
    install(server);
    const later = new Date(pki.notAfter(server.cert).getTime() + 1000);
    const log = await start(live, HOST, () => later);
    const warning = log.lines().find((l) => l['event'] === 'tls_certificate_expired');
    expect(warning?.['level']).to.equal(40);
    expect(String(warning?.['msg'])).to.equal(
      `the TLS certificate (CN=vpn1.example.net) expired at ` +
        `${pki.notAfter(server.cert).toISOString()}: clients that check it refuse the connection`,
    );
  });

  it('warns at start that tokens travel in clear on a non-loopback address without TLS', async () => {
    const log = await start(null, '0.0.0.0');
    const warning = log.lines().find((l) => l['event'] === 'plain_http');
    expect(warning?.['level']).to.equal(40);
    expect(String(warning?.['msg'])).to.contain('bearer tokens travel in clear');
    expect(log.lines().find((l) => l['msg'] === 'wg-peerd is serving')).to.include({ tls: 'off' });
  });

  it('does not warn on loopback without TLS, nor on a non-loopback address with TLS', async () => {
    const plain = await start(null);
    await daemon!.shutdown();
    daemon = undefined;
    install(server);
    const secure = await start({ ...live, clientCa: null }, '0.0.0.0');
    for (const log of [plain, secure]) {
      expect(log.lines().some((l) => l['event'] === 'plain_http')).to.equal(false);
      expect(log.lines().some((l) => l['event'] === 'tls_certificate_expired')).to.equal(false);
    }
  });
});
