/**
 * Issue 31: every event about a peer carries its `name` (null when it has none), the name it
 * has when the event is published: a created peer's from its create, a renamed one's new name,
 * a deleted one's last name.
 */
import { expect } from 'chai';
import { Events, type StoredEvent } from '../../../src/events';
import { PeerService, type PeerSnapshot } from '../../../src/peers';
import { FakeKernel } from '../support/fake-kernel';
import { captureLog } from '../support/log-capture';

describe('events: the name of the peer in every peer event (issue 31)', () => {
  it('writes the name the peer has when the event is published, and null for none', async () => {
    const kernel = FakeKernel.withInterface();
    const log = captureLog();
    const events: Events = new Events({
      interfaceName: 'wg0',
      historySize: 100,
      snapshot: (): Promise<PeerSnapshot> => service.snapshot(),
      listMaxAgeMs: 1000,
      logger: log.logger,
      nameOf: (publicKey) => service.nameOf(publicKey),
    });
    const service: PeerService = new PeerService({
      kernel,
      interfaceName: 'wg0',
      endpointHost: 'vpn.example.net',
      logger: log.logger,
      events: events.sink,
    });
    const seen: StoredEvent[] = [];
    events.hub.subscribe((e) => seen.push(e));
    const named = await service.createPeer({ name: 'Ana' });
    const plain = await service.createPeer();
    await service.setName(named.publicKey, 'Ana B');
    await service.setSpeedLimit(named.publicKey, 125_000);
    await service.setSuspension(plain.publicKey, true);
    await service.deletePeer(named.publicKey);
    const data = seen.map((e) => JSON.parse(e.json) as Record<string, unknown>);
    expect(data.map((d) => [d['type'], d['public_key'], d['name']])).to.deep.equal([
      ['peer.created', named.publicKey, 'Ana'],
      ['peer.created', plain.publicKey, null],
      ['peer.limit_changed', named.publicKey, 'Ana B'],
      ['peer.suspended', plain.publicKey, null],
      ['peer.deleted', named.publicKey, 'Ana B'],
    ]);
  });
});
