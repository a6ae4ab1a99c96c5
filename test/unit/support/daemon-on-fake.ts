/**
 * A whole daemon (startDaemon) over the in-memory kernel, with a state dir on the in-memory file
 * system when `fs` is given (at STATE_DIR), and a boot id of the test's choosing (another one is a
 * reboot). Its log is captured.
 */
import type { Config } from '../../../src/config';
import { startDaemon } from '../../../src/main';
import type { MemoryFs } from '../../support/memory-fs';
import { testConfig } from './config';
import type { FakeKernel } from './fake-kernel';
import { captureLog } from './log-capture';

export const STATE_DIR = '/var/lib/wg-peerd';

export async function startOnFake(
  kernel: FakeKernel,
  options: { fs?: MemoryFs; bootId?: string; config?: Partial<Config> } = {},
) {
  const log = captureLog();
  const daemon = await startDaemon(
    testConfig({
      ...(options.fs === undefined ? {} : { stateDir: STATE_DIR }),
      ...options.config,
    }),
    {
      openKernel: async () => kernel,
      logger: log.logger,
      readBootId: async () => options.bootId ?? 'boot-1',
      ...(options.fs === undefined ? {} : { stateFs: options.fs }),
    },
  );
  return { daemon, log };
}
