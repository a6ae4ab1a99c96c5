/**
 * The HTTP API over the real kernel clients: list, create, filter, limit, cap, suspend, resume,
 * suspend again, delete, delete again, on an interface set up with ip/wg. Keys come from a seeded random source so the
 * recorded requests replay byte for byte; the oracle is wg/tc/nft at each step.
 */
import { createHash } from 'node:crypto';
import request from 'supertest';
import { createApp } from '../../src/http/app';
import { recording as recordingResponses } from '../support/response-recorder';
import { listPeers, toPeerJson } from '../support/peer-list';
import {
  type ExpiryApi,
  type NamedPeer,
  type NamesApi,
  type PeerExpiry,
  openKernel,
} from '../../src/kernel';
import { ticksPerMicrosecond } from '../../src/kernel/tc/htb';
import { createLogger } from '../../src/log';
import { PeerService } from '../../src/peers';
import { testKeyPair } from '../support/keys';
import type { Scenario } from './scenario';

export const API_IF = 'wgapi0';
export const existingPeer = testKeyPair('api existing peer');
const serverKey = testKeyPair('api server');

export interface ApiStep {
  status: number;
  body: Record<string, unknown>;
  /** The body as sent. */
  text: string;
  /**
   * Lists only: today's serializer over the same read (JSON.stringify of toPeerJson over
   * PeerService.listPeers), the reference the list body must equal byte for byte.
   */
  reference?: string;
}

export type ApiScenarioResult = Record<
  | 'list'
  | 'create'
  | 'dead'
  | 'limit'
  | 'cap'
  | 'suspend'
  | 'listAfter'
  | 'resume'
  | 'suspendAgain'
  | 'remove'
  | 'removeAgain',
  ApiStep
>;

/** Deterministic bytes: SHA-256 in counter mode over a fixed seed. */
function seededRandom(seed: string): (length: number) => Uint8Array {
  let counter = 0;
  return (length) => {
    const out = Buffer.alloc(length);
    for (let offset = 0; offset < length; offset += 32) {
      createHash('sha256').update(`${seed}:${counter++}`).digest().copy(out, offset);
    }
    return out;
  };
}

/** A names facility in memory: the contract of NamesApi without the kernel's set. */
function memoryNames(): NamesApi {
  const set = new Map<string, NamedPeer>();
  return {
    listNames: async () => [...set.values()],
    setNames: async (_ifname, names) => {
      for (const { peer, name } of names) {
        if (name === null) set.delete(peer.address);
        else set.set(peer.address, { address: peer.address, publicKey: peer.publicKey, name });
      }
    },
    removeNames: async (_ifname, addresses) => {
      for (const address of addresses) set.delete(address);
    },
    ensure: async () => ({
      names: new Map([...set.values()].map((n) => [n.publicKey, n.name])),
      repairs: [],
    }),
  };
}

/** An expiry facility in memory (issue 31): this transcript predates the expiry sets too. */
function memoryExpiry(): ExpiryApi {
  const set = new Map<string, PeerExpiry>();
  return {
    listExpiries: async () => [...set.values()],
    listValid: async () => new Set([...set.values()].map((e) => e.address)),
    setExpiry: async (_ifname, peer, expiresAt) => {
      if (expiresAt === null) set.delete(peer.address);
      else set.set(peer.address, { address: peer.address, publicKey: peer.publicKey, expiresAt });
    },
    removeExpiries: async (_ifname, refs) => {
      for (const ref of refs) set.delete(ref.address);
    },
    ensure: async () => undefined,
  };
}

function teardown(sh: (command: string) => string): void {
  sh(`ip link del ${API_IF} 2>/dev/null || true; ip link del ifb-${API_IF} 2>/dev/null || true`);
  sh(`nft delete table ip wg_peerd_${API_IF} 2>/dev/null || true; rm -f /tmp/${API_IF}.key`);
  sh(`nft delete table ip wg_peerd_suspend_${API_IF} 2>/dev/null || true`);
}

export const apiPeers: Scenario<ApiScenarioResult> = {
  name: 'api-peers',
  description:
    'GET /api/peers, POST /api/peer, ?status=DEAD, PATCH speed-limit, data-cap and suspension (suspend, GET, resume, suspend), DELETE twice, through PeerService over the real kernel clients',
  setup(sh) {
    teardown(sh);
    sh(`ip link add ${API_IF} type wireguard`);
    sh(`umask 077; echo ${serverKey.privateKeyBase64} > /tmp/${API_IF}.key`);
    sh(`wg set ${API_IF} private-key /tmp/${API_IF}.key listen-port 51820`);
    sh(`wg set ${API_IF} peer ${existingPeer.publicKey} allowed-ips 10.70.0.2/32`);
    sh(`ip addr add 10.70.0.1/24 dev ${API_IF} && ip link set ${API_IF} up`);
  },
  async run({ open, recording, sh, oracle }) {
    if (recording) oracle.psched = sh('cat /proc/net/psched');
    const real = await openKernel(open, {
      shaper: { ticksPerUs: ticksPerMicrosecond(String(oracle.psched)) },
    });
    // Peer names (issue 31) have their own transcript (./names.ts); this one was recorded before
    // the names facility existed, so here names are kept in memory (no names set in the kernel).
    const kernel = { ...real, names: memoryNames(), expiry: memoryExpiry() };
    const logger = createLogger({ level: 'silent' });
    const service = new PeerService({
      kernel,
      interfaceName: API_IF,
      endpointHost: '192.0.2.1',
      logger,
      random: seededRandom('api-peers'),
      // A window long enough that each list's reference below is served from the same read:
      // the kernel is read exactly as often as without it, since every write ends the window.
      listMaxAgeMs: 60_000,
    });
    const app = recordingResponses(createApp({ service, logger }));
    const step = async (test: request.Test): Promise<ApiStep> => {
      const response = await test;
      return {
        status: response.status,
        body: response.body as Record<string, unknown>,
        text: response.text,
      };
    };
    const listStep = async (query: '' | '?status=DEAD'): Promise<ApiStep> => {
      const listed = await step(request(app).get(`/api/peers${query}`));
      const filter = query === '' ? null : 'DEAD';
      const entries = await listPeers(service, filter);
      const reference = JSON.stringify({
        success: true,
        peers: entries.map(toPeerJson),
        total_count: entries.length,
        filter,
      });
      return { ...listed, reference };
    };
    const note = (key: string, command: string): void => {
      if (recording) oracle[key] = sh(command);
    };
    try {
      const list = await listStep('');
      note('listDump', `wg show ${API_IF} dump`);
      const create = await step(request(app).post('/api/peer'));
      note('createDump', `wg show ${API_IF} dump`);
      const key = encodeURIComponent(String((create.body.peer as { publicKey: string }).publicKey));
      const dead = await listStep('?status=DEAD');
      const limit = await step(
        request(app).patch(`/api/peer/${key}/speed-limit`).send({ bytesPerSecond: 125000 }),
      );
      note('classes', `tc -j class show dev ${API_IF}`);
      const cap = await step(
        request(app).patch(`/api/peer/${key}/data-cap`).send({ quotaBytes: 2000000 }),
      );
      note('quota', `nft -j list table ip wg_peerd_${API_IF}`);
      const suspension = (suspended: boolean): Promise<ApiStep> =>
        step(request(app).patch(`/api/peer/${key}/suspension`).send({ suspended }));
      const suspend = await suspension(true);
      note('suspended', `nft -j list table ip wg_peerd_suspend_${API_IF}`);
      const listAfter = await listStep('');
      const resume = await suspension(false);
      note('resumed', `nft -j list set ip wg_peerd_suspend_${API_IF} suspended`);
      const suspendAgain = await suspension(true);
      const remove = await step(request(app).delete(`/api/peer/${key}`));
      note('removeDump', `wg show ${API_IF} dump`);
      note('removeClasses', `tc -j class show dev ${API_IF}`);
      note('removeQuota', `nft -j list table ip wg_peerd_${API_IF}`);
      note('removeSuspended', `nft -j list set ip wg_peerd_suspend_${API_IF} suspended`);
      const removeAgain = await step(request(app).delete(`/api/peer/${key}`));
      return {
        list,
        create,
        dead,
        limit,
        cap,
        suspend,
        listAfter,
        resume,
        suspendAgain,
        remove,
        removeAgain,
      };
    } finally {
      kernel.close();
    }
  },
  teardown,
};
