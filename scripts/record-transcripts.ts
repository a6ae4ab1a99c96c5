/**
 * Records every transcript scenario against the real kernel (run inside the VM as root by
 * `npm run record-transcripts`). Writes $OUT_DIR/transcripts/<name>.json; the host side copies
 * them to test/fixtures/transcripts/. Optional arguments select scenarios by name.
 */
import { execSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { release } from 'node:os';
import path from 'node:path';
import { TranscriptRecorder } from '../src/netlink/transcript';
import { scenarios } from '../test/transcripts/all';

function sh(command: string): string {
  return execSync(command, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
}

async function main(): Promise<void> {
  const outDir = path.join(process.env.OUT_DIR ?? '/tmp', 'transcripts');
  mkdirSync(outDir, { recursive: true });
  const wanted = new Set(process.argv.slice(2));
  for (const scenario of scenarios) {
    if (wanted.size > 0 && !wanted.has(scenario.name)) continue;
    const recorder = new TranscriptRecorder(scenario.description, release());
    scenario.setup?.(sh);
    try {
      await scenario.run({ open: recorder.open, recording: true, sh, oracle: recorder.oracle });
    } finally {
      scenario.teardown?.(sh);
    }
    recorder.save(path.join(outDir, `${scenario.name}.json`));
    console.log(`recorded ${scenario.name}`);
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
