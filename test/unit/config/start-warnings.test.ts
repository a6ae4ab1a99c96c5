import { expect } from 'chai';
import { startDaemon, type Daemon } from '../../../src/main';
import { FakeKernel } from '../support/fake-kernel';
import { testConfig } from '../support/config';
import { captureLog } from '../support/log-capture';

const ADMIN = 'admin-token-0123456789abcdef';
const READ = 'read-token-0123456789abcdef';

// Issue 30: a start without any token says, once and loudly, what that means on this host.
describe('daemon start: the warning of a start without token (issue 30)', () => {
  let daemon: Daemon | null = null;
  afterEach(async () => {
    await daemon?.shutdown();
    daemon = null;
  });

  async function warnings(config: Parameters<typeof testConfig>[0]) {
    const log = captureLog();
    daemon = await startDaemon(testConfig(config), {
      openKernel: async () => FakeKernel.withInterface(),
      logger: log.logger,
    });
    return log.lines().filter((l) => l.event === 'no_token');
  }

  it('logs one warn line: every local process has admin rights, and how to give a token', async () => {
    const lines = await warnings({});
    expect(lines).to.have.length(1);
    expect(lines[0]!.level).to.equal(40);
    expect(lines[0]!.msg).to.equal(
      'no token is configured: every local process, of any user, has admin rights over the ' +
        'API; give --token-file PATH or WG_PEERD_TOKEN',
    );
  });

  it('says nothing of it with an admin token', async () => {
    expect(
      await warnings({
        tokens: { admin: [ADMIN], read: [] },
        tokenSources: { admin: { kind: 'value', tokens: [ADMIN] }, read: null },
      }),
    ).to.deep.equal([]);
  });

  it('says nothing of it with read tokens alone (nobody may change anything)', async () => {
    expect(
      await warnings({
        tokens: { admin: [], read: [READ] },
        tokenSources: { admin: null, read: { kind: 'value', tokens: [READ] } },
      }),
    ).to.deep.equal([]);
  });
});
