import { expect } from 'chai';
import { chmodSync, copyFileSync } from 'node:fs';
import https from 'node:https';
import { httpsCall, httpsFailure, plainHttpAnswer } from '../support/https-client';
import { TestPki, type KeyPairFiles } from '../support/pki';
import { type DaemonProcess, startDaemon } from './support/daemon';
import { SERVER_UNDERLAY_IP, assertInTestVm, deleteLink, sh, wgShowDump } from './support/topology';

const IFNAME = 'wgtls0';
const HOST = '127.0.0.1';
const PORT = 18443;
const TOKEN = 'tls-kernel-admin-token-0123456789';

/** The daemon's JSON log lines so far (other lines and a line still being written are skipped). */
function logLines(daemon: DaemonProcess): Array<Record<string, unknown>> {
  return daemon
    .output()
    .split('\n')
    .flatMap((line) => {
      try {
        return [JSON.parse(line) as Record<string, unknown>];
      } catch {
        return [];
      }
    });
}

// Issue 22, done-when 1: the daemon started as operators start it (npm start) with
// --tls-cert, --tls-key and --tls-client-ca, on the real kernel; certificates made by openssl,
// the peers checked with wg.
describe('HTTPS with mutual TLS on the real kernel (npm start)', function () {
  const pki = new TestPki();
  let ca: KeyPairFiles;
  let server: KeyPairFiles;
  let client: { ca: string; cert: string; key: string };
  /** The files the daemon serves; a renewal replaces their content. */
  const live = { cert: pki.file('live.pem'), key: pki.file('live.key') };
  const install = (pair: KeyPairFiles): void => {
    copyFileSync(pair.cert, live.cert);
    copyFileSync(pair.key, live.key);
    chmodSync(live.key, 0o600);
  };
  let daemon: DaemonProcess | undefined;

  before(async function () {
    // openssl and the daemon's start, under emulation.
    this.timeout(300_000);
    assertInTestVm();
    deleteLink(IFNAME);
    ca = pki.ca('clients-and-server-ca');
    server = pki.issue(ca, 'server', '/CN=vpn1.example.net', 'server');
    const panel = pki.issue(ca, 'panel', '/O=billing/CN=panel-1', 'client');
    client = { ca: pki.read(ca.cert), cert: pki.read(panel.cert), key: pki.read(panel.key) };
    install(server);
    daemon = await startDaemon({
      args: [
        '--interface',
        IFNAME,
        '--listen',
        `${HOST}:${PORT}`,
        '--listen-port',
        '51843',
        '--endpoint-host',
        SERVER_UNDERLAY_IP,
        '--tls-cert',
        live.cert,
        '--tls-key',
        live.key,
        '--tls-client-ca',
        ca.cert,
      ],
      env: { WG_PEERD_TOKEN: TOKEN },
      listen: `${HOST}:${PORT}`,
      token: TOKEN,
      tls: client,
    });
  });

  after(async function () {
    await daemon?.stop();
    deleteLink(IFNAME);
    deleteLink(`ifb-${IFNAME}`);
    sh(`nft delete table ip wg_peerd_${IFNAME} 2>/dev/null || true`);
  });

  it('lists and creates peers over HTTPS for a client with a certificate from the CA and a token', async () => {
    const before = await httpsCall(HOST, PORT, 'GET', '/api/peers', { ...client, token: TOKEN });
    expect(before.status).to.equal(200);
    expect(before.json()).to.include({ success: true, total_count: 0 });
    expect(before.serverFingerprint).to.equal(pki.fingerprint(server.cert));

    const created = await httpsCall(HOST, PORT, 'POST', '/api/peer', { ...client, token: TOKEN });
    expect(created.status).to.equal(201);
    const peer = created.json<{ peer: { publicKey: string; ip: string } }>().peer;
    // The kernel holds it (wg, the oracle), and the list over HTTPS shows it.
    const kernel = wgShowDump(IFNAME).peers.find((p) => p.publicKey === peer.publicKey);
    expect(kernel?.allowedIps).to.deep.equal([`${peer.ip}/32`]);
    const after = await httpsCall(HOST, PORT, 'GET', '/api/peers', { ...client, token: TOKEN });
    expect(
      after.json<{ peers: Array<{ public_key: string }> }>().peers.map((p) => p.public_key),
    ).to.deep.equal([peer.publicKey]);
    // The change line names the machine (client certificate) and the caller (token).
    const change = logLines(daemon!).find((l) => l['event'] === 'peer_created');
    expect(change).to.include({ clientCertificate: 'O=billing, CN=panel-1' });
  });

  it('fails the handshake of a client without a certificate', async () => {
    const failure = await httpsFailure(HOST, PORT, '/api/peers', { ca: client.ca, token: TOKEN });
    expect(failure.code).to.match(/^(ERR_SSL_TLSV13_ALERT_CERTIFICATE_REQUIRED|ECONNRESET)$/);
    // The daemon's line may reach its pipe after the client has seen the failure.
    const refusedLine = (): boolean =>
      logLines(daemon!).some(
        (l) =>
          l['msg'] === 'TLS handshake refused' &&
          l['code'] === 'ERR_SSL_PEER_DID_NOT_RETURN_A_CERTIFICATE',
      );
    for (let waited = 0; !refusedLine() && waited < 100; waited += 1) {
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    expect(refusedLine(), daemon!.output()).to.equal(true);
  });

  it('gives plain HTTP to the port no API answer', async () => {
    expect(await plainHttpAnswer(HOST, PORT, TOKEN)).to.equal('');
  });

  it('after a renewal and SIGHUP, serves the new certificate to new connections while an open keep-alive connection keeps working', async () => {
    const agent = new https.Agent({ keepAlive: true, maxSockets: 1 });
    try {
      const first = await httpsCall(HOST, PORT, 'GET', '/api/peers', {
        ...client,
        agent,
        token: TOKEN,
      });
      expect(first.serverFingerprint).to.equal(pki.fingerprint(server.cert));

      const renewed = pki.issue(ca, 'renewed', '/CN=vpn1.example.net', 'server', 30);
      install(renewed);
      daemon!.signal('SIGHUP');
      // Until the daemon says it re-read the files, the open connection is kept busy (the
      // server closes one idle for 5 s), and each answer on it must come over the same socket.
      const reloaded = (): boolean => logLines(daemon!).some((l) => l['event'] === 'tls_reloaded');
      for (let waited = 0; !reloaded(); waited += 1) {
        if (waited > 60) throw new Error(`no tls_reloaded line:\n${daemon!.output()}`);
        const kept = await httpsCall(HOST, PORT, 'GET', '/healthz', { ...client, agent });
        expect(kept).to.include({ status: 200, reused: true });
        await new Promise((resolve) => setTimeout(resolve, 500));
      }

      const onOpen = await httpsCall(HOST, PORT, 'GET', '/api/peers', {
        ...client,
        agent,
        token: TOKEN,
      });
      expect(onOpen).to.include({ status: 200, reused: true });
      expect(onOpen.serverFingerprint).to.equal(pki.fingerprint(server.cert));

      const fresh = await httpsCall(HOST, PORT, 'GET', '/api/peers', { ...client, token: TOKEN });
      expect(fresh.status).to.equal(200);
      expect(fresh.serverFingerprint).to.equal(pki.fingerprint(renewed.cert));
      const metrics = await httpsCall(HOST, PORT, 'GET', '/metrics', { ...client, token: TOKEN });
      expect(metrics.text).to.contain(
        'wg_peerd_tls_certificate_expiry_timestamp_seconds ' +
          `${pki.notAfter(renewed.cert).getTime() / 1000}\n`,
      );
    } finally {
      agent.destroy();
    }
  });
});
