import { expect } from 'chai';
import { type DaemonProcess, type JsonResponse, api, startDaemon } from './support/daemon';
import { assertInTestVm, deleteLink, sh } from './support/topology';

// Issue 10's findings, reproduced against a real kernel with a running daemon and changes made
// behind its back with ip/tc/nft (which are also the oracles of what the kernel holds).
const IFNAME = 'wgb0';
const LISTEN = '127.0.0.1:18090';
const DAEMON_ARGS = ['--interface', IFNAME, '--listen', LISTEN, '--endpoint-host', '192.0.2.1'];

function cleanUp(): void {
  deleteLink(IFNAME);
  deleteLink(`ifb-${IFNAME}`);
  sh(`nft delete table ip wg_peerd_${IFNAME} 2>/dev/null || true`);
}

describe('the interface deleted under a running daemon (real kernel)', function () {
  let daemon: DaemonProcess | undefined;

  before(async function () {
    assertInTestVm();
    cleanUp();
    daemon = await startDaemon({ args: DAEMON_ARGS, listen: LISTEN });
  });

  after(async function () {
    await daemon?.stop();
    cleanUp();
  });

  it('answers every route 503 INTERFACE_MISSING once `ip link del` removed it', async () => {
    const created = await api(daemon!, 'POST', '/api/peer');
    expect(created.status).to.be.oneOf([200, 201]);
    const key = encodeURIComponent(
      (created.body as unknown as { peer: { publicKey: string } }).peer.publicKey,
    );
    expect(
      (await api(daemon!, 'PATCH', `/api/peer/${key}/speed-limit`, { bytesPerSecond: 11_111 }))
        .status,
    ).to.equal(200);
    expect(
      (await api(daemon!, 'PATCH', `/api/peer/${key}/data-cap`, { quotaBytes: 1_000_000 })).status,
    ).to.equal(200);

    sh(`ip link del ${IFNAME}`);

    const routes: Array<[string, string, Record<string, unknown>?]> = [
      ['GET', '/api/peers'],
      ['GET', '/api/peers?status=ALIVE'],
      ['POST', '/api/peer'],
      ['PATCH', `/api/peer/${key}/speed-limit`, { bytesPerSecond: 5_000 }],
      ['DELETE', `/api/peer/${key}/speed-limit`],
      ['PATCH', `/api/peer/${key}/data-cap`, { quotaBytes: 5_000 }],
      ['DELETE', `/api/peer/${key}/data-cap`],
      ['DELETE', `/api/peer/${key}`],
    ];
    const answers: string[] = [];
    // Twice: the first list may be answered from a read in flight before the delete.
    for (let round = 0; round < 2; round++) {
      for (const [method, route, body] of routes) {
        const response: JsonResponse = await api(daemon!, method, route, body);
        answers.push(`${method} ${route} ${response.status} ${String(response.body.code)}`);
      }
    }
    expect(answers.filter((a) => !/ 503 INTERFACE_MISSING$/.test(a))).to.deep.equal([]);
  });
});
