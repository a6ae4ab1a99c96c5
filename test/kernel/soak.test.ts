/**
 * A bounded soak (issue 10): the real daemon on a fresh interface with a /22, several async
 * workers creating and deleting peers, setting and removing speed limits and data caps and
 * listing, for about a minute, with one SIGKILL of the daemon in the middle and a restart. Then
 * `wg show dump`, `tc` and `nft -j` are the oracles: no duplicate address, no tc class or u32
 * node and no quota object or map element without a peer, the API's list equal to the kernel's
 * peers, addresses, limits and caps, and an operator's nft table untouched.
 *
 * What the oracles rely on is the documented layout (README "How it is built"): limit classes
 * 1:<low 16 bits of the address in hex> on the interface and its IFB "ifb-<if>", u32 key nodes
 * 2XX:Y:1 for address a.b.X.Y, quota objects in table `ip wg_peerd_<if>` with the owner's public
 * key in their comment, and the object map "caps" from address to quota object.
 */
import { expect } from 'chai';
import { type DaemonProcess, type JsonResponse, api, startDaemon } from './support/daemon';
import {
  assertInTestVm,
  deleteNftTable,
  removeDaemonLeftovers,
  sh,
  wgShowDump,
} from './support/topology';

const IFNAME = 'wgsoak0';
const IFB = `ifb-${IFNAME}`;
const TABLE = `wg_peerd_${IFNAME}`;
const LISTEN = '127.0.0.1:18095';
const SERVER = '10.77.0.1';
const PREFIX = 22;
const DAEMON_ARGS = [
  '--interface',
  IFNAME,
  '--listen',
  LISTEN,
  '--address',
  `${SERVER}/${PREFIX}`,
  '--listen-port',
  '51895',
  '--endpoint-host',
  '192.0.2.1',
];
const OPERATOR = 'soak_operator';

/** Load bounds: about a minute of load, a bounded number of requests. */
const WORKERS = 5;
const LOAD_MS = 60_000;
const KILL_AFTER_MS = 25_000;
/** After the restart the workers go on at least this long, so the restarted daemon is loaded too. */
const AFTER_RESTART_MS = 10_000;
const MAX_OPS_PER_WORKER = 400;

interface ListedPeer {
  public_key: string;
  ip_address: string;
  speed_limit_bytes_per_second: number | null;
  data_cap: { quota_bytes: number; used_bytes: number } | null;
}

type Op = 'create' | 'delete' | 'limit' | 'unlimit' | 'cap' | 'uncap' | 'list';
/** Weighted so the peer count grows slowly while every operation runs often. */
const OPS: Op[] = [
  'create',
  'create',
  'create',
  'delete',
  'delete',
  'limit',
  'limit',
  'unlimit',
  'cap',
  'cap',
  'uncap',
  'list',
  'list',
];

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));
const pick = <T>(items: T[]): T => items[Math.floor(Math.random() * items.length)];

function json(cmd: string): unknown {
  return JSON.parse(sh(cmd));
}

/** tc's class id of an address's limit: 1:<low 16 bits in hex>. */
function classIdOf(address: string): string {
  const [, , c, d] = address.split('.').map(Number);
  return `1:${((c << 8) | d).toString(16)}`;
}

/** Address of a peer u32 key node 2XX:Y:1 (X the third octet, Y the fourth), else null. */
function addressOfNode(fh: string): string | null {
  const match = /^2([0-9a-f]{2}):([0-9a-f]+):[0-9a-f]+$/.exec(fh);
  if (!match) return null;
  return `10.77.${parseInt(match[1], 16)}.${parseInt(match[2], 16)}`;
}

/** Bits per second of a tc rate as iproute2 prints it ("80Kbit", "1500Kbit", "8Mbit"). */
function parseRate(text: string): number {
  const match = /^(\d+)([KMGT]?)(i?)bit$/.exec(text);
  if (!match) throw new Error(`unreadable tc rate ${text}`);
  const kilo = match[3] ? 1024 : 1000;
  return Number(match[1]) * kilo ** ' KMGT'.indexOf(match[2] || ' ');
}

/**
 * HTB classes of a device: class id → rate in bytes per second. The host's iproute2 (6.1) prints
 * classes as text even with -j, so this reads `tc class show`. Its rate text is exact for the
 * limits the soak sets (multiples of 125 bytes/s: whole Kbit).
 */
function tcClasses(dev: string): Map<string, number> {
  const classes = new Map<string, number>();
  for (const line of sh(`tc class show dev ${dev}`).split('\n')) {
    const match = /^class htb (\S+) .*\brate (\S+)/.exec(line);
    if (match) classes.set(match[1], parseRate(match[2]) / 8);
  }
  return classes;
}

/** Every u32 node handle ("fh") and every target class ("flowid") tc shows on a device. */
function tcFilterRefs(dev: string): { nodes: string[]; flowids: string[] } {
  const text = sh(`tc filter show dev ${dev}`);
  return {
    nodes: [...text.matchAll(/\bfh (\S+)/g)].map((m) => m[1]),
    flowids: [...text.matchAll(/\b(?:flowid|classid) (\S+)/g)].map((m) => m[1]),
  };
}

interface NftTableView {
  /** quota object name → bytes, the public key in its comment */
  quotas: Map<string, { bytes: number; owner: string | null }>;
  /** map element: address → object name */
  elements: Map<string, string>;
}
function nftTable(): NftTableView {
  const view: NftTableView = { quotas: new Map(), elements: new Map() };
  if (!sh(`nft list tables ip`).includes(TABLE)) return view;
  const entries = (
    json(`nft -j list table ip ${TABLE}`) as {
      nftables: Array<Record<string, Record<string, unknown>>>;
    }
  ).nftables;
  for (const entry of entries) {
    if (entry.quota) {
      const comment = typeof entry.quota.comment === 'string' ? entry.quota.comment : '';
      view.quotas.set(String(entry.quota.name), {
        bytes: Number(entry.quota.bytes),
        owner: /[A-Za-z0-9+/]{43}=/.exec(comment)?.[0] ?? null,
      });
    }
    if (entry.map && Array.isArray(entry.map.elem)) {
      for (const element of entry.map.elem as unknown[]) {
        // [key, value]; a key with options comes as {"elem": {"val": key, ...}}
        const [key, value] = element as [unknown, unknown];
        const address =
          typeof key === 'string' ? key : String((key as { elem?: { val?: unknown } }).elem?.val);
        view.elements.set(address, String(value));
      }
    }
  }
  return view;
}

describe('soak: concurrent API load with a daemon crash, then kernel == API', function () {
  this.timeout(900_000);
  let daemon: DaemonProcess | undefined;
  let operatorBefore = '';

  before(function () {
    assertInTestVm();
    removeDaemonLeftovers(IFNAME);
    deleteNftTable('inet', OPERATOR);
    // An operator's own table, there before the daemon and the soak.
    sh(`nft add table inet ${OPERATOR}`);
    sh(
      `nft add chain inet ${OPERATOR} operator_forward '{ type filter hook forward priority 0; policy accept; }'`,
    );
    sh(
      `nft add set inet ${OPERATOR} blocked '{ type ipv4_addr; elements = { 10.77.1.9, 198.51.100.7 }; }'`,
    );
    sh(`nft add rule inet ${OPERATOR} operator_forward ip saddr @blocked drop`);
    sh(`nft add quota inet ${OPERATOR} monthly '{ over 300 mbytes; }'`);
    operatorBefore = sh(`nft -j list table inet ${OPERATOR}`);
  });

  after(async function () {
    await daemon?.stop();
    removeDaemonLeftovers(IFNAME);
    deleteNftTable('inet', OPERATOR);
  });

  it('keeps the kernel and the API consistent through a minute of load and a SIGKILL', async () => {
    daemon = await startDaemon({ args: DAEMON_ARGS, listen: LISTEN });

    const known: string[] = [];
    const counts = new Map<string, number>();
    const count = (what: string): void => void counts.set(what, (counts.get(what) ?? 0) + 1);
    const unexpected: string[] = [];
    const duplicatesSeen: string[] = [];
    let down = false;
    let restarted = false;
    const started = Date.now();

    // Writers keep writing through the outage: their requests really reach the closed port (and
    // the restarting daemon), so they go to the address, not to the `daemon` of the moment;
    // `down` only tells which connection errors are expected. An answer that is not JSON
    // throws and is counted with them.
    const target = { baseUrl: `http://${LISTEN}` };
    const send = (method: string, path: string, body?: unknown): Promise<JsonResponse> =>
      api(target, method, path, body);

    const worker = async (id: number): Promise<void> => {
      for (let n = 0; n < MAX_OPS_PER_WORKER; n++) {
        const elapsed = Date.now() - started;
        if (elapsed > LOAD_MS && restarted) break;
        if (elapsed > LOAD_MS + 600_000) break; // the restart never came: the test fails below
        const op: Op = known.length === 0 ? 'create' : pick(OPS);
        const key = known.length > 0 ? pick(known) : '';
        const path = `/api/peer/${encodeURIComponent(key)}`;
        try {
          let response: JsonResponse;
          switch (op) {
            case 'create':
              response = await send('POST', '/api/peer');
              if (response.status === 201)
                known.push((response.body.peer as { publicKey: string }).publicKey);
              break;
            case 'delete':
              response = await send('DELETE', path);
              break;
            case 'limit':
              response = await send('PATCH', `${path}/speed-limit`, {
                // whole Kbit (125 bytes/s), so tc's printed rate is exact: 8 Kbit to ~80 Mbit
                bytesPerSecond: 125 * (8 + Math.floor(Math.random() * 80_000)),
              });
              break;
            case 'unlimit':
              response = await send('DELETE', `${path}/speed-limit`);
              break;
            case 'cap':
              response = await send('PATCH', `${path}/data-cap`, {
                quotaBytes: 1 + Math.floor(Math.random() * 1e12),
              });
              break;
            case 'uncap':
              response = await send('DELETE', `${path}/data-cap`);
              break;
            case 'list': {
              response = await send('GET', '/api/peers');
              const ips = (response.body.peers as ListedPeer[]).map((p) => p.ip_address);
              if (new Set(ips).size !== ips.length) duplicatesSeen.push(ips.join(','));
              break;
            }
          }
          // Another worker may have deleted the peer first: 404 is an expected answer then.
          const expected =
            response.status < 300 || (response.status === 404 && op !== 'create' && op !== 'list');
          if (op === 'delete' && (response.status === 200 || response.status === 404)) {
            const at = known.indexOf(key);
            if (at >= 0) known.splice(at, 1);
          }
          count(`${op} ${response.status}`);
          if (!expected)
            unexpected.push(
              `worker ${id} ${op}: ${response.status} ${JSON.stringify(response.body)}`,
            );
        } catch (error) {
          // While the daemon is down (killed, restarting) connections fail: expected, logged.
          count(`${op} connection error${down ? ' (daemon down)' : ''}`);
          const cause = (error as Error & { code?: string }).code ?? (error as Error).message;
          if (!down) unexpected.push(`worker ${id} ${op}: ${cause}`);
          await sleep(500);
        }
      }
    };

    const crash = async (): Promise<void> => {
      await sleep(KILL_AFTER_MS);
      down = true;
      const killed = daemon!;
      const status = await killed.kill();
      console.log(
        `      SIGKILL after ${Date.now() - started} ms (npm start exit status ${status})`,
      );
      daemon = await startDaemon({ args: DAEMON_ARGS, listen: LISTEN });
      down = false;
      console.log(`      restarted and serving after ${Date.now() - started} ms`);
      await sleep(AFTER_RESTART_MS);
      restarted = true;
    };

    await Promise.all([crash(), ...Array.from({ length: WORKERS }, (_, i) => worker(i))]);
    const loadMs = Date.now() - started;
    console.log(`      ${loadMs} ms of load by ${WORKERS} workers; requests by outcome:`);
    for (const [what, n] of [...counts].sort()) console.log(`        ${what}: ${n}`);
    expect(unexpected, 'unexpected answers while the daemon was up').to.deep.equal([]);
    expect(duplicatesSeen, 'lists that showed one address twice').to.deep.equal([]);

    // The kernel, through the oracles.
    const dump = wgShowDump(IFNAME);
    const addressOf = new Map<string, string>(); // public key → address
    const allAddresses: string[] = [];
    for (const peer of dump.peers) {
      expect(peer.allowedIps, `allowed IPs of ${peer.publicKey}`).to.have.length(1);
      expect(peer.allowedIps[0]).to.match(/^10\.77\.[0-3]\.\d+\/32$/);
      const address = peer.allowedIps[0].replace(/\/32$/, '');
      addressOf.set(peer.publicKey, address);
      allAddresses.push(address);
    }
    expect(allAddresses.length, 'peers left in the kernel').to.be.greaterThan(0);
    expect(new Set(allAddresses).size, 'distinct addresses').to.equal(allAddresses.length);
    expect(allAddresses).to.not.include(SERVER);
    const peerAddresses = new Set(allAddresses);

    const classes = { wg: tcClasses(IFNAME), ifb: tcClasses(IFB) };
    for (const [dev, map] of Object.entries(classes)) {
      const orphans = [...map.keys()].filter(
        (handle) => handle !== '1:ffff' && ![...peerAddresses].some((a) => classIdOf(a) === handle),
      );
      expect(orphans, `tc classes without a peer on ${dev}`).to.deep.equal([]);
    }
    for (const dev of [IFNAME, IFB]) {
      const refs = tcFilterRefs(dev);
      const nodeOrphans = refs.nodes.filter((fh) => {
        const address = addressOfNode(fh);
        return address !== null && !peerAddresses.has(address);
      });
      expect(nodeOrphans, `u32 key nodes without a peer on ${dev}`).to.deep.equal([]);
      const classMap = dev === IFNAME ? classes.wg : classes.ifb;
      const dangling = refs.flowids.filter((id) => id.startsWith('1:') && !classMap.has(id));
      expect(dangling, `u32 nodes pointing at no class on ${dev}`).to.deep.equal([]);
      // every limited peer's key node is there
      for (const address of peerAddresses) {
        if (!classMap.has(classIdOf(address))) continue;
        const hasNode = refs.nodes.some((fh) => addressOfNode(fh) === address);
        expect(hasNode, `u32 node of limited ${address} on ${dev}`).to.equal(true);
      }
    }

    const nft = nftTable();
    const objectOwners = new Map([...nft.quotas].map(([name, q]) => [name, q.owner]));
    for (const [name, quota] of nft.quotas) {
      expect(
        quota.owner !== null && addressOf.has(quota.owner),
        `owner of quota object ${name}`,
      ).to.equal(true);
    }
    for (const [address, object] of nft.elements) {
      expect(peerAddresses.has(address), `map element ${address} has a peer`).to.equal(true);
      expect(
        objectOwners.has(object),
        `map element ${address} → existing object ${object}`,
      ).to.equal(true);
      expect(
        addressOf.get(objectOwners.get(object)!),
        `owner of ${object} has ${address}`,
      ).to.equal(address);
    }
    expect(nft.elements.size, 'one map element per quota object').to.equal(nft.quotas.size);

    // The API's list against the kernel.
    const list = await api(daemon!, 'GET', '/api/peers');
    expect(list.status).to.equal(200);
    const listed = list.body.peers as ListedPeer[];
    expect(
      new Map(listed.map((p) => [p.public_key, p.ip_address])),
      'API peers and addresses == wg show dump',
    ).to.deep.equal(addressOf);
    let limits = 0;
    let caps = 0;
    for (const peer of listed) {
      const cls = classes.wg.get(classIdOf(peer.ip_address));
      const ifbCls = classes.ifb.get(classIdOf(peer.ip_address));
      expect(
        peer.speed_limit_bytes_per_second,
        `limit of ${peer.ip_address} (tc on ${IFNAME})`,
      ).to.equal(cls ?? null);
      expect(ifbCls ?? null, `limit of ${peer.ip_address} (tc on ${IFB})`).to.equal(cls ?? null);
      const element = nft.elements.get(peer.ip_address);
      const quota = element === undefined ? undefined : nft.quotas.get(element);
      expect(peer.data_cap?.quota_bytes ?? null, `cap of ${peer.ip_address} (nft)`).to.equal(
        quota?.bytes ?? null,
      );
      if (cls) limits++;
      if (quota) caps++;
    }
    console.log(
      `      end state: ${listed.length} peers, ${limits} limits, ${caps} caps; kernel == API`,
    );

    expect(
      JSON.parse(sh(`nft -j list table inet ${OPERATOR}`)),
      'the operator table',
    ).to.deep.equal(JSON.parse(operatorBefore));
  });
});
