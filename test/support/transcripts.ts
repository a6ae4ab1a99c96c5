/**
 * Replays a recorded scenario: loads test/fixtures/transcripts/<name>.json, runs the scenario's
 * calls against it and checks that every recorded request was made.
 */
import path from 'node:path';
import { TranscriptPlayer } from '../../src/netlink/transcript';
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
