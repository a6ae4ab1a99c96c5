/**
 * Peer names against a real kernel (issue 31, Done when 3): set at create, renamed, cleared and
 * filtered, kept in the kernel's names set (nf_tables element userdata, src/kernel/names), so a
 * daemon restarted WITHOUT a state directory lists them again. `nft -j list table ip
 * wg_peerd_names_<if>` is the oracle of what the kernel holds.
 */
import { expect } from 'chai';
import { type DaemonProcess, api, startDaemon } from './support/daemon';
import { assertInTestVm, removeDaemonLeftovers, sh } from './support/topology';

const IFNAME = 'wgnames';
const LISTEN = '127.0.0.1:18132';
const ARGS = [
  ...['--interface', IFNAME, '--listen', LISTEN],
  ...['--address', '10.32.0.1/24', '--endpoint-host', '192.0.2.1'],
];

type Listed = Array<Record<string, unknown>>;

/** The names set's elements as nft prints them: address → comment (the name). */
function kernelNames(): Array<[string, string]> {
  const listing = JSON.parse(sh(`nft -j list table ip wg_peerd_names_${IFNAME}`)) as {
    nftables: Array<Record<string, { name?: string; elem?: unknown[] }>>;
  };
  const set = listing.nftables.find((e) => e['set']?.name === 'names')?.['set'];
  return ((set?.elem ?? []) as Array<{ elem: { val: string; comment: string } }>)
    .map((e) => [e.elem.val, e.elem.comment] as [string, string])
    .sort(([a], [b]) => a.localeCompare(b));
}

describe('peer names in the kernel, across a daemon restart without a state dir (real kernel, issue 31)', function () {
  let daemon: DaemonProcess | undefined;

  before(function () {
    assertInTestVm();
    removeDaemonLeftovers(IFNAME);
  });

  after(async function () {
    await daemon?.stop();
    removeDaemonLeftovers(IFNAME);
  });

  const list = async (query = ''): Promise<Listed> =>
    ((await api(daemon!, 'GET', `/api/peers${query}`)).body as { peers: Listed }).peers;

  it('sets, renames, clears and filters names, the kernel holding each one as the element of its address', async () => {
    daemon = await startDaemon({ args: ARGS, listen: LISTEN });
    const ana = (await api(daemon, 'POST', '/api/peer', { name: 'laptop of Ana' })).body as {
      peer: { publicKey: string; ip: string };
    };
    const shop = (await api(daemon, 'POST', '/api/peer', { name: 'old shop' })).body as {
      peer: { publicKey: string; ip: string };
    };
    const third = (await api(daemon, 'POST', '/api/peer', { name: 'third' })).body as {
      peer: { publicKey: string; ip: string };
    };
    const path = (p: { publicKey: string }): string =>
      `/api/peer/${encodeURIComponent(p.publicKey)}/name`;
    expect((await api(daemon, 'PATCH', path(shop.peer), { name: 'shop ☂' })).status).to.equal(200);
    expect((await api(daemon, 'PATCH', path(third.peer), { name: null })).status).to.equal(200);
    expect(kernelNames()).to.deep.equal([
      [ana.peer.ip, 'laptop of Ana'],
      [shop.peer.ip, 'shop ☂'],
    ]);
    const filtered = await list(`?name=${encodeURIComponent('shop ☂')}`);
    expect(filtered.map((p) => p['public_key'])).to.deep.equal([shop.peer.publicKey]);
    const tooLong = await api(daemon, 'PATCH', path(third.peer), { name: '😀'.repeat(55) });
    expect(tooLong.status).to.equal(400);
    // A delete takes the peer's name out of the kernel.
    const gone = (await api(daemon, 'POST', '/api/peer', { name: 'gone' })).body as {
      peer: { publicKey: string; ip: string };
    };
    expect(kernelNames()).to.have.length(3);
    expect(
      (await api(daemon, 'DELETE', `/api/peer/${encodeURIComponent(gone.peer.publicKey)}`)).status,
    ).to.equal(200);
    expect(kernelNames().map(([address]) => address)).to.not.include(gone.peer.ip);
  });

  it('lists the same names after a restart without a state dir, and filters by them', async () => {
    const before = (await list()).map((p) => [p['public_key'], p['name']]);
    expect(await daemon!.stop()).to.equal(0);
    daemon = await startDaemon({ args: ARGS, listen: LISTEN });
    const after = (await list()).map((p) => [p['public_key'], p['name']]);
    expect(after).to.deep.equal(before);
    expect(after.map(([, name]) => name)).to.deep.equal(['laptop of Ana', 'shop ☂', null]);
    const filtered = await list(`?name=${encodeURIComponent('laptop of Ana')}`);
    expect(filtered).to.have.length(1);
    expect(filtered[0]!['name']).to.equal('laptop of Ana');
  });
});
