/**
 * Replays a recorded scenario: loads test/fixtures/transcripts/<name>.json, runs the scenario's
 * calls against it and checks that every recorded request was made.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { NLMSG_DONE, NLMSG_ERROR, parseMessages, type NetlinkMessage } from '../../src/netlink';
import { TranscriptPlayer, type Transcript } from '../../src/netlink/transcript';
import type { Scenario } from '../transcripts/scenario';

export const FIXTURES = path.resolve(
  __dirname,
  '..',
  '..',
  '..',
  'test',
  'fixtures',
  'transcripts',
);

/**
 * Every multipart answer of the named recordings whose messages (NLMSG_DONE and errors left out)
 * are all of `type`, one per exchange: real kernels' dumps, for tests that hold a decoder to
 * another reading of the same bytes.
 */
export function recordedAnswers(names: readonly string[], type: number): NetlinkMessage[][] {
  const out: NetlinkMessage[][] = [];
  for (const name of names) {
    const transcript = JSON.parse(
      readFileSync(path.join(FIXTURES, `${name}.json`), 'utf8'),
    ) as Transcript;
    for (const socket of transcript.sockets) {
      for (const exchange of socket.exchanges) {
        const messages = exchange.received
          .filter((datagram): datagram is string => typeof datagram === 'string')
          .flatMap((hex) => parseMessages(Buffer.from(hex, 'hex')))
          .filter((message) => message.type !== NLMSG_DONE && message.type !== NLMSG_ERROR);
        if (messages.length > 0 && messages.every((message) => message.type === type)) {
          out.push(messages);
        }
      }
    }
  }
  return out;
}

export interface Replayed<R> {
  result: R;
  oracle: Record<string, unknown>;
  kernel: string;
}

export async function replay<R>(scenario: Scenario<R>): Promise<Replayed<R>> {
  const player = TranscriptPlayer.load(path.join(FIXTURES, `${scenario.name}.json`));
  const result = await scenario.run({
    open: player.open,
    recording: false,
    sh: () => {
      throw new Error('shell commands run only while recording');
    },
    oracle: player.transcript.oracle,
  });
  player.assertConsumed();
  return { result, oracle: player.transcript.oracle, kernel: player.transcript.kernel };
}
