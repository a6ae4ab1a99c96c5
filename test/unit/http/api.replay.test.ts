import { expect } from 'chai';
import nacl from 'tweetnacl';
import { replay } from '../../support/transcripts';
import { parseWgDump } from '../../support/wg-dump';
import { type ApiScenarioResult, apiPeers, existingPeer } from '../../transcripts/api';
import { NO_PERIOD } from './helpers';
import { withoutReadAt } from '../../support/peer-list';

interface Listed {
  public_key: string;
  ip_address: string | null;
  last_handshake: string | null;
  minutes_since_handshake: number | null;
  status: string;
  speed_limit_bytes_per_second: number | null;
  data_cap: {
    quota_bytes: number;
    used_bytes: number;
    enforced: boolean;
    after_cap: string;
    throttle_bytes_per_second: number | null;
    exhausted_at: string | null;
    throttled: boolean;
  } | null;
  speed_limit_holds: string | null;
  suspended: boolean;
}

/** The elements of a set as `nft -j list` prints them: addresses, or objects with a comment. */
interface NftSetElements {
  set?: { name: string; elem?: Array<string | { elem: { val: string; comment?: string } }> };
}

function suspendedIn(json: unknown): Array<{ address: string; comment?: string }> {
  const entries = (JSON.parse(String(json)) as { nftables: NftSetElements[] }).nftables;
  const set = entries.find((e) => e.set?.name === 'suspended')?.set;
  return (set?.elem ?? []).map((e) =>
    typeof e === 'string' ? { address: e } : { address: e.elem.val, comment: e.elem.comment },
  );
}

interface NftQuota {
  quota?: { name: string; bytes: number; used: number; comment?: string };
}

// The API through PeerService and the real kernel clients, replayed from a transcript recorded
// in the VM; every expectation is checked against SPEC.md/DESIGN.md and wg/tc/nft output
// recorded at the same moment.
describe('HTTP API over recorded kernel exchanges', () => {
  let result: ApiScenarioResult;
  let oracle: Record<string, unknown>;
  let createdKey: string;

  before(async () => {
    ({ result, oracle } = await replay(apiPeers));
    createdKey = (result.create.body.peer as { publicKey: string }).publicKey;
  });

  it('lists the peer wg shows, with null handshake fields and "No handshake yet"', () => {
    expect(result.list.status).to.equal(200);
    const dump = parseWgDump(String(oracle.listDump));
    const peers = result.list.body.peers as Listed[];
    expect(peers.map((p) => p.public_key)).to.deep.equal(dump.peers.map((p) => p.publicKey));
    expect(peers[0]).to.include({
      public_key: existingPeer.publicKey,
      ip_address: '10.70.0.2',
      last_handshake: null,
      minutes_since_handshake: null,
      status: 'No handshake yet',
    });
    expect(result.list.body).to.include({ success: true, total_count: 1, filter: null });
  });

  it("sends each list body byte for byte as today's serializer gives it for the same read", () => {
    for (const step of [result.list, result.dead, result.listAfter]) {
      expect(step.reference).to.be.a('string');
      expect(step.text).to.equal(step.reference);
    }
    // The reference itself holds what the oracle checks above and below hold.
    expect(result.listAfter.text).to.contain('"speed_limit_bytes_per_second":125000');
  });

  it('creates a peer on the lowest free address, as the kernel then holds it', () => {
    expect(result.create.status).to.equal(201);
    const body = result.create.body as {
      success: boolean;
      peer: { ip: string; privateKey: string; publicKey: string };
      server: { publicKey: string; endpoint: string };
    };
    expect(body.success).to.equal(true);
    expect(body.peer.ip).to.equal('10.70.0.3'); // .1 is the server, .2 the existing peer
    const dump = parseWgDump(String(oracle.createDump));
    expect(dump.peers.find((p) => p.publicKey === body.peer.publicKey)?.allowedIps).to.deep.equal([
      '10.70.0.3/32',
    ]);
    expect(body.server.publicKey).to.equal(dump.device.publicKey);
    expect(body.server.endpoint).to.equal('192.0.2.1:51820');
    const derived = nacl.scalarMult.base(Buffer.from(body.peer.privateKey, 'base64'));
    expect(Buffer.from(derived).toString('base64')).to.equal(body.peer.publicKey);
  });

  it('filters by status and echoes the filter', () => {
    expect(result.dead.status).to.equal(200);
    expect(result.dead.body).to.include({ filter: 'DEAD', total_count: 0 });
    expect(result.dead.body.peers).to.deep.equal([]);
  });

  it('sets a speed limit that tc shows as the peer class at 1 Mbit (125,000 B/s)', () => {
    expect(result.limit.status).to.equal(200);
    expect(result.limit.body.success).to.equal(true);
    expect(String(oracle.classes)).to.match(/class htb 1:3 parent 1:ffff .*rate 1Mbit ceil 1Mbit/);
  });

  it('sets a data cap that nft shows as the peer quota with its key as comment', () => {
    expect(result.cap.status).to.equal(200);
    const objects = (JSON.parse(String(oracle.quota)) as { nftables: NftQuota[] }).nftables;
    const quota = objects.find((o) => o.quota?.name === 'q_10_70_0_3')?.quota;
    expect(quota?.bytes).to.equal(2_000_000);
    expect(quota?.comment).to.contain(createdKey);
  });

  it('lists the limit and the cap read back from the kernel', () => {
    const peer = (result.listAfter.body.peers as Listed[]).find((p) => p.public_key === createdKey);
    expect(peer?.speed_limit_bytes_per_second).to.equal(125_000);
    expect(peer?.speed_limit_holds).to.equal('both');
    expect(withoutReadAt(peer?.data_cap)).to.deep.equal({
      quota_bytes: 2_000_000,
      used_bytes: 0,
      enforced: true,
      ...NO_PERIOD,
      after_cap: 'block',
      throttle_bytes_per_second: null,
      exhausted_at: null,
      throttled: false,
    });
  });

  it('suspends the peer: nft shows its address in the suspended set, owned by its key, dropped both ways', () => {
    expect(result.suspend.status).to.equal(200);
    expect(result.suspend.body.success).to.equal(true);
    expect(suspendedIn(oracle.suspended)).to.deep.equal([
      { address: '10.70.0.3', comment: `wg-peerd peer ${createdKey}` },
    ]);
    const rules = (
      JSON.parse(String(oracle.suspended)) as {
        nftables: Array<{ rule?: { chain: string; expr: unknown[] } }>;
      }
    ).nftables.flatMap((e) => (e.rule ? [e.rule] : []));
    expect(rules.map((r) => r.chain).sort()).to.deep.equal(['from_peers', 'to_peers']);
    for (const rule of rules) {
      expect(JSON.stringify(rule.expr)).to.contain('"@suspended"').and.to.contain('"drop"');
    }
  });

  it('lists the suspended peer as suspended, and the other one not', () => {
    const peers = result.listAfter.body.peers as Listed[];
    expect(peers.find((p) => p.public_key === createdKey)?.suspended).to.equal(true);
    expect(peers.find((p) => p.public_key === existingPeer.publicKey)?.suspended).to.equal(false);
  });

  it('resumes the peer: nft shows the suspended set empty', () => {
    expect(result.resume.status).to.equal(200);
    expect(suspendedIn(oracle.resumed)).to.deep.equal([]);
    expect(result.suspendAgain.status).to.equal(200);
  });

  it('deletes the peer with its limit and cap, and answers a second delete with 404', () => {
    expect(result.remove.status).to.equal(200);
    expect(result.remove.body.success).to.equal(true);
    expect(typeof result.remove.body.message).to.equal('string');
    expect(parseWgDump(String(oracle.removeDump)).peers.map((p) => p.publicKey)).to.deep.equal([
      existingPeer.publicKey,
    ]);
    expect(String(oracle.removeClasses)).to.not.match(/class htb 1:3 /);
    expect(String(oracle.removeQuota)).to.not.contain('q_10_70_0_3');
    expect(suspendedIn(oracle.removeSuspended)).to.deep.equal([]); // its suspension too
    expect(result.removeAgain.status).to.equal(404);
    expect(result.removeAgain.body).to.include({ success: false, error: 'Peer not found in VPN' });
  });
});
