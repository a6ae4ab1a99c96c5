/**
 * The test bench itself: proves the VM has what every other kernel test stands on — the
 * wireguard module, a client namespace joined by veth, a real handshake through the tunnel, and
 * the tc and nf_tables modules autoloading. Configured with ip/wg/tc/nft only; no wg-peerd code.
 */
import { expect } from 'chai';
import * as fs from 'node:fs';

import {
  CLIENT_NS,
  CLIENT_UNDERLAY_IP,
  SERVER_UNDERLAY_IP,
  WgInterface,
  addWgPeer,
  assertInTestVm,
  createWgInterface,
  deleteLink,
  linkExists,
  netnsExists,
  ping,
  setupClientNamespace,
  sh,
  teardownClientNamespace,
  trySh,
  wgShowDump,
} from './support/topology';

const SERVER_IF = 'wgbench0';
const CLIENT_IF = 'wgbench1';
const SERVER_PORT = 51899;
const TABLE = 'wgpeerd_bench';

describe('kernel test bench (VM)', function () {
  before(function () {
    assertInTestVm();
  });

  // Mocha runs a suite's own tests before its child suites: every step is a child suite, in order.
  describe('the VM', function () {
    it('runs the tests as root with the wireguard module loaded', function () {
      expect(process.getuid?.()).to.equal(0);
      sh('modprobe wireguard');
      expect(fs.existsSync('/sys/module/wireguard'), '/sys/module/wireguard').to.equal(true);
    });
  });

  describe('a server in the root namespace and a client in wgcli', function () {
    let server: WgInterface;
    let client: WgInterface;

    before(function () {
      setupClientNamespace();
      server = createWgInterface({
        name: SERVER_IF,
        address: '10.98.0.1/24',
        listenPort: SERVER_PORT,
      });
      client = createWgInterface({ name: CLIENT_IF, netns: CLIENT_NS, address: '10.98.0.2/24' });
      addWgPeer(SERVER_IF, undefined, {
        publicKey: client.key.publicKey,
        allowedIps: ['10.98.0.2/32'],
      });
      addWgPeer(CLIENT_IF, CLIENT_NS, {
        publicKey: server.key.publicKey,
        allowedIps: ['10.98.0.0/24'],
        endpoint: `${SERVER_UNDERLAY_IP}:${SERVER_PORT}`,
        persistentKeepalive: 25,
      });
    });

    after(function () {
      deleteLink(SERVER_IF);
      teardownClientNamespace();
    });

    it('joins the namespaces with a veth pair', function () {
      expect(netnsExists(CLIENT_NS)).to.equal(true);
      ping(CLIENT_NS, SERVER_UNDERLAY_IP);
      ping(undefined, CLIENT_UNDERLAY_IP);
    });

    it('completes a real handshake and pings through the tunnel both ways', function () {
      ping(CLIENT_NS, '10.98.0.1');
      ping(undefined, '10.98.0.2');
    });

    it('shows the handshake and byte counters in `wg show dump`, every field parsed', function () {
      const dump = wgShowDump(SERVER_IF);
      expect(dump.device.publicKey).to.equal(server.key.publicKey);
      expect(dump.device.privateKey).to.equal(server.key.privateKey);
      expect(dump.device.listenPort).to.equal(SERVER_PORT);
      expect(dump.device.fwmark).to.equal(0);
      expect(dump.peers).to.have.length(1);
      const peer = dump.peers[0];
      expect(peer.publicKey).to.equal(client.key.publicKey);
      expect(peer.presharedKey).to.equal(null);
      expect(peer.endpoint).to.match(
        new RegExp(`^${CLIENT_UNDERLAY_IP.replace(/\./g, '\\.')}:\\d+$`),
      );
      expect(peer.allowedIps).to.deep.equal(['10.98.0.2/32']);
      expect(peer.latestHandshake).to.be.greaterThan(0);
      expect(Math.abs(Date.now() - peer.latestHandshake * 1000)).to.be.below(120_000);
      expect(peer.rxBytes).to.be.greaterThan(0);
      expect(peer.txBytes).to.be.greaterThan(0);
      expect(peer.persistentKeepalive).to.equal(0);

      const clientSide = wgShowDump(CLIENT_IF, CLIENT_NS).peers[0];
      expect(clientSide.publicKey).to.equal(server.key.publicKey);
      expect(clientSide.endpoint).to.equal(`${SERVER_UNDERLAY_IP}:${SERVER_PORT}`);
      expect(clientSide.persistentKeepalive).to.equal(25);
      expect(clientSide.latestHandshake).to.be.greaterThan(0);
    });
  });

  describe('traffic control and nf_tables modules autoload', function () {
    const DEV = 'benchdummy0';

    after(function () {
      deleteLink(DEV);
      trySh(`nft delete table inet ${TABLE}`);
    });

    it('tc adds an htb qdisc, a class and a u32 filter', function () {
      deleteLink(DEV);
      sh(`ip link add ${DEV} type dummy && ip link set ${DEV} up`);
      sh(`tc qdisc add dev ${DEV} root handle 1: htb default 10`);
      sh(`tc class add dev ${DEV} parent 1: classid 1:10 htb rate 1mbit`);
      sh(
        `tc filter add dev ${DEV} parent 1: protocol ip prio 1 u32 ` +
          `match ip dst 10.98.0.2/32 flowid 1:10`,
      );
      expect(sh(`tc qdisc show dev ${DEV}`)).to.match(/qdisc htb 1: root/);
      expect(sh(`tc filter show dev ${DEV}`)).to.match(/u32/);
    });

    it('tc adds an ifb device fed by an ingress mirred redirect', function () {
      const ifb = 'benchifb0';
      deleteLink(ifb);
      try {
        sh(`ip link add ${ifb} type ifb && ip link set ${ifb} up`);
        sh(`tc qdisc add dev ${DEV} handle ffff: ingress`);
        sh(
          `tc filter add dev ${DEV} parent ffff: protocol ip u32 match u32 0 0 ` +
            `action mirred egress redirect dev ${ifb}`,
        );
        expect(sh(`tc filter show dev ${DEV} parent ffff:`)).to.match(/mirred/);
      } finally {
        deleteLink(ifb);
      }
    });

    it('nft adds a table with a named quota', function () {
      trySh(`nft delete table inet ${TABLE}`);
      sh(`nft add table inet ${TABLE}`);
      sh(`nft add quota inet ${TABLE} bench { over 1000 bytes }`);
      const listed = sh(`nft list table inet ${TABLE}`);
      expect(listed).to.contain(`table inet ${TABLE}`);
      expect(listed).to.match(/quota bench/);
      sh(`nft delete table inet ${TABLE}`);
    });
  });

  describe('cleanup', function () {
    it('leaves nothing behind for the next test file', function () {
      expect(netnsExists(CLIENT_NS)).to.equal(false);
      expect(linkExists(SERVER_IF)).to.equal(false);
      expect(linkExists('benchdummy0')).to.equal(false);
      expect(trySh(`nft list table inet ${TABLE}`)).to.equal(false);
    });
  });
});
