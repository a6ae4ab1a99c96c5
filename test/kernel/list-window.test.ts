import { expect } from 'chai';
import { type DaemonProcess, api, startDaemon } from './support/daemon';
import {
  SERVER_UNDERLAY_IP,
  assertInTestVm,
  removeDaemonLeftovers,
  sh,
  wgShowDump,
} from './support/topology';

const IFNAME = 'wglw0';
const LISTEN = '127.0.0.1:18090';

interface ListedPeer {
  public_key: string;
  speed_limit_bytes_per_second: number | null;
}

// DESIGN §5: with the default freshness window (1000 ms) a list that starts after a change made
// through the daemon always sees the change. Each list follows its write at once, well inside
// the window, so a list answered from the window's earlier read would fail here.
describe('list freshness window: a list after a write sees it (real kernel, npm start)', function () {
  let daemon: DaemonProcess | undefined;

  before(function () {
    assertInTestVm();
    removeDaemonLeftovers(IFNAME);
  });

  after(async function () {
    await daemon?.stop();
    removeDaemonLeftovers(IFNAME);
  });

  const listed = async (): Promise<ListedPeer[]> => {
    const response = await api(daemon!, 'GET', '/api/peers');
    expect(response.status).to.equal(200);
    // The data's age: Age in whole seconds agrees with the precise header.
    const ageMs = Number(response.headers.get('x-data-age-ms'));
    expect(Number(response.headers.get('age'))).to.equal(Math.floor(ageMs / 1000));
    return response.body.peers as ListedPeer[];
  };

  it('lists a created peer, its limit and its deletion at once, as wg and tc hold them', async () => {
    daemon = await startDaemon({
      args: ['--interface', IFNAME, '--listen', LISTEN, '--endpoint-host', SERVER_UNDERLAY_IP],
      listen: LISTEN,
    });
    expect(await listed()).to.deep.equal([]); // opens a window on the empty device

    const created = await api(daemon, 'POST', '/api/peer');
    expect(created.status).to.equal(201);
    const key = (created.body.peer as { publicKey: string }).publicKey;
    expect(wgShowDump(IFNAME).peers.map((p) => p.publicKey)).to.deep.equal([key]);
    expect((await listed()).map((p) => p.public_key)).to.deep.equal([key]);

    const path = `/api/peer/${encodeURIComponent(key)}`;
    const limited = await api(daemon, 'PATCH', `${path}/speed-limit`, { bytesPerSecond: 125000 });
    expect(limited.status).to.equal(200);
    expect(sh(`tc class show dev ${IFNAME}`)).to.match(/rate 1Mbit/);
    expect((await listed())[0]?.speed_limit_bytes_per_second).to.equal(125000);

    const removed = await api(daemon, 'DELETE', path);
    expect(removed.status).to.equal(200);
    expect(wgShowDump(IFNAME).peers).to.deep.equal([]);
    expect(await listed()).to.deep.equal([]);
  });
});
