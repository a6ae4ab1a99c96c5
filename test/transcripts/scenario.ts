/**
 * A transcript scenario is one sequence of kernel calls, run twice: once in the VM against the
 * real kernel by `npm run record-transcripts` (which also captures what wg/tc/nft report as the
 * oracle), and once under mocha against the recorded transcript. Requests must be deterministic
 * (fixed keys, names and addresses) so the replay can check them byte for byte.
 */
import type { TransportFactory } from '../../src/netlink';

export interface ScenarioContext {
  /** Opens the sockets the kernel clients use: recording or replaying. */
  open: TransportFactory;
  /** True while recording in the VM; oracle commands may only run then. */
  recording: boolean;
  /** Runs a shell command in the VM (recording only): set-up and oracle reads. */
  sh(command: string): string;
  /** Recording: the scenario writes what the oracle said. Replay: what it said then. */
  oracle: Record<string, unknown>;
}

export interface Scenario<R = unknown> {
  /** File name under test/fixtures/transcripts/, without .json. */
  name: string;
  description: string;
  /** Recording only: prepare the kernel with ip/wg/tc/nft (not recorded). */
  setup?(sh: (command: string) => string): void;
  /** The recorded calls. Returns what the replay test asserts on. */
  run(context: ScenarioContext): Promise<R>;
  /** Recording only: clean up (not recorded). */
  teardown?(sh: (command: string) => string): void;
}
