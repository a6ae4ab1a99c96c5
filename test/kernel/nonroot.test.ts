import { expect } from 'chai';
import { chmodSync, chownSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { type DaemonProcess, api, startDaemon } from './support/daemon';
import {
  SERVER_UNDERLAY_IP,
  assertInTestVm,
  linkExists,
  removeDaemonLeftovers,
  setupClientNamespace,
  sh,
  teardownClientNamespace,
  wgShowDump,
} from './support/topology';

const IFNAME = 'wgn0';
const LISTEN = '127.0.0.1:18090';
/** `nobody` of the host's /etc/passwd, which the guest shares. */
const UID = 65534;
const GID = 65534;
/** CAP_NET_ADMIN is capability 12 (linux/capability.h): the only bit the daemon may hold. */
const CAP_NET_ADMIN_MASK = (1n << 12n).toString(16).padStart(16, '0');
/** What the systemd unit grants (contrib/systemd/wg-peerd.service), done with setpriv. */
const AS_SERVICE_USER = [
  'setpriv',
  `--reuid=${UID}`,
  `--regid=${GID}`,
  '--clear-groups',
  '--inh-caps=-all,+net_admin',
  '--ambient-caps=-all,+net_admin',
  '--bounding-set=-all,+net_admin',
  '--no-new-privs',
];
const ADMIN_TOKEN = 'nonroot-admin-token-0123456789';
const READ_TOKEN = 'nonroot-read-token-0123456789';
const ROTATED_ADMIN_TOKEN = 'nonroot-rotated-admin-token-0123';

interface CreatedPeer {
  peer: { ip: string; publicKey: string };
}

function statusField(pid: number, field: string): string {
  const line = readFileSync(`/proc/${pid}/status`, 'utf8')
    .split('\n')
    .find((l) => l.startsWith(`${field}:`));
  return (line ?? '').slice(field.length + 1).trim();
}

// Done-when 1 of issue 9: the daemon needs nothing but CAP_NET_ADMIN. It runs as `nobody` with
// only that capability (ambient, bounding set and no-new-privs as in the systemd unit) and does
// the whole peer life cycle; wg, tc and nft (run as root by the test) are the oracles.
describe('daemon as a non-root user with only CAP_NET_ADMIN (real kernel)', function () {
  let daemon: DaemonProcess | undefined;
  let created: CreatedPeer;
  let auth = ADMIN_TOKEN;
  let adminFile = '';

  /** A token file as the README says: owned by the service user, mode 0600. */
  function tokenFile(file: string, text: string): string {
    writeFileSync(file, text, { mode: 0o600 });
    chmodSync(file, 0o600);
    chownSync(file, UID, GID);
    return file;
  }

  before(function () {
    assertInTestVm();
    setupClientNamespace();
    removeDaemonLeftovers(IFNAME);
  });

  after(async function () {
    await daemon?.stop();
    removeDaemonLeftovers(IFNAME);
    teardownClientNamespace();
  });

  it('starts as nobody, creates the interface, and holds CAP_NET_ADMIN alone', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'nonroot-'));
    chmodSync(dir, 0o755);
    adminFile = tokenFile(path.join(dir, 'admin.tokens'), `${ADMIN_TOKEN}\n`);
    const readFile = tokenFile(path.join(dir, 'read.tokens'), `# monitoring\n${READ_TOKEN}\n`);
    expect(linkExists(IFNAME)).to.equal(false);
    daemon = await startDaemon({
      prefix: AS_SERVICE_USER,
      args: [
        '--interface',
        IFNAME,
        '--listen',
        LISTEN,
        '--endpoint-host',
        SERVER_UNDERLAY_IP,
        '--token-file',
        adminFile,
        '--read-token-file',
        readFile,
      ],
      listen: LISTEN,
      token: ADMIN_TOKEN,
    });
    const pid = daemon.child.pid!;
    expect(statusField(pid, 'Uid').split(/\s+/)).to.deep.equal(Array(4).fill(String(UID)));
    expect(statusField(pid, 'CapEff')).to.equal(CAP_NET_ADMIN_MASK);
    expect(statusField(pid, 'CapBnd')).to.equal(CAP_NET_ADMIN_MASK);
    expect(statusField(pid, 'NoNewPrivs')).to.equal('1');
    expect(wgShowDump(IFNAME).device.listenPort).to.equal(51820);
    expect(sh(`ip -4 -o addr show dev ${IFNAME}`)).to.contain('10.8.0.1/24');
  });

  it('creates a peer that the kernel holds', async () => {
    const response = await api(daemon!, 'POST', '/api/peer', undefined, auth);
    expect(response.status, JSON.stringify(response.body)).to.equal(201);
    created = response.body as unknown as CreatedPeer;
    const inKernel = wgShowDump(IFNAME).peers.find((p) => p.publicKey === created.peer.publicKey);
    expect(inKernel?.allowedIps).to.deep.equal([`${created.peer.ip}/32`]);
  });

  it('limits and caps the peer (tc and nft hold them) and lists both', async () => {
    const key = encodeURIComponent(created.peer.publicKey);
    const limit = await api(
      daemon!,
      'PATCH',
      `/api/peer/${key}/speed-limit`,
      { bytesPerSecond: 250_000 },
      auth,
    );
    expect(limit.status, JSON.stringify(limit.body)).to.equal(200);
    const cap = await api(
      daemon!,
      'PATCH',
      `/api/peer/${key}/data-cap`,
      { quotaBytes: 7_000_000 },
      auth,
    );
    expect(cap.status, JSON.stringify(cap.body)).to.equal(200);
    // 250,000 bytes/s is 2 Mbit/s in tc's units.
    expect(sh(`tc class show dev ${IFNAME}`)).to.match(/rate 2Mbit/);
    expect(sh(`nft -j list table ip wg_peerd_${IFNAME}`)).to.contain('7000000');
    const list = await api(daemon!, 'GET', '/api/peers', undefined, auth);
    expect(list.status).to.equal(200);
    const peer = (list.body.peers as Array<Record<string, unknown>>).find(
      (p) => p.public_key === created.peer.publicKey,
    );
    expect(peer?.speed_limit_bytes_per_second).to.equal(250_000);
    expect((peer?.data_cap as { quota_bytes: number }).quota_bytes).to.equal(7_000_000);
  });

  it('lets the read token list but not change, and rotates the admin token on a real SIGHUP', async () => {
    const list = await api(daemon!, 'GET', '/api/peers', undefined, READ_TOKEN);
    expect(list.status).to.equal(200);
    expect(list.body.total_count).to.equal(1);
    const write = await api(daemon!, 'POST', '/api/peer', undefined, READ_TOKEN);
    expect(write.status).to.equal(403);
    expect(write.body.code).to.equal('FORBIDDEN_READ_ONLY');

    tokenFile(adminFile, `${ROTATED_ADMIN_TOKEN}\n`);
    process.kill(daemon!.child.pid!, 'SIGHUP');
    // The signal is handled asynchronously: wait for the new token to be accepted.
    const deadline = Date.now() + 60_000;
    while (
      (await api(daemon!, 'GET', '/api/peers', undefined, ROTATED_ADMIN_TOKEN)).status !== 200
    ) {
      if (Date.now() > deadline) throw new Error(`SIGHUP did not rotate:\n${daemon!.output()}`);
      await new Promise((resolve) => setTimeout(resolve, 250));
    }
    expect((await api(daemon!, 'GET', '/api/peers', undefined, ADMIN_TOKEN)).status).to.equal(401);
    expect(daemon!.output()).to.match(/"event":"tokens_reloaded","admin":1,"read":1/);
    auth = ROTATED_ADMIN_TOKEN;
  });

  it('deletes the peer with its limit and cap, and stops with status 0', async () => {
    const key = encodeURIComponent(created.peer.publicKey);
    const response = await api(daemon!, 'DELETE', `/api/peer/${key}`, undefined, auth);
    expect(response.status, JSON.stringify(response.body)).to.equal(200);
    expect(wgShowDump(IFNAME).peers.some((p) => p.publicKey === created.peer.publicKey)).to.equal(
      false,
    );
    expect(sh(`tc class show dev ${IFNAME}`)).to.not.match(/rate 2Mbit/);
    expect(sh(`nft -j list table ip wg_peerd_${IFNAME}`)).to.not.contain('7000000');
    expect(await daemon!.stop()).to.equal(0);
    daemon = undefined;
  });
});
