import { expect } from 'chai';
import http from 'node:http';
import { parseConfig, type Config } from '../../../src/config';
import { startDaemon, type Daemon } from '../../../src/main';
import type { ReadTokenFile } from '../../../src/token-files';
import { FakeKernel } from '../support/fake-kernel';
import { captureLog } from '../support/log-capture';

const OLD_ADMIN = 'old-admin-token-0123456789';
const NEW_ADMIN = 'new-admin-token-9876543210';
const OLD_READ = 'old-read-token-0123456789ab';
const NEW_READ = 'new-read-token-ba9876543210';

/** Token files held in memory; `mode` is what fstat would report. */
class Files {
  readonly content = new Map<string, { text: string; mode: number }>();
  set(path: string, text: string, mode = 0o600): void {
    this.content.set(path, { text, mode: 0o100000 | mode });
  }
  readonly read: ReadTokenFile = (path) => {
    const file = this.content.get(path);
    if (file === undefined) {
      throw Object.assign(new Error(`ENOENT: no such file or directory, open '${path}'`), {
        code: 'ENOENT',
      });
    }
    return file;
  };
}

function status(daemon: Daemon, method: string, path: string, token: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        host: '127.0.0.1',
        port: daemon.address.port,
        method,
        path,
        agent: false,
        headers: { authorization: `Bearer ${token}` },
      },
      (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
      },
    );
    req.on('error', reject);
    req.end();
  });
}

// Issue 9: SIGHUP re-reads both token files; success replaces the tokens, a failed re-read keeps
// the old ones and says why. The SIGHUP handler of main.ts calls exactly daemon.reloadTokens().
describe('token rotation (what SIGHUP does)', () => {
  let daemon: Daemon | undefined;
  afterEach(async () => {
    await daemon?.shutdown();
    daemon = undefined;
  });

  async function start(files: Files) {
    const outcome = parseConfig(
      [
        '--listen',
        '127.0.0.1:1',
        '--token-file',
        '/etc/wg-peerd/admin.tokens',
        '--read-token-file',
        '/etc/wg-peerd/read.tokens',
      ],
      {},
      files.read,
    );
    if (outcome.kind !== 'run') throw new Error('expected a configuration');
    const config: Config = { ...outcome.config, listen: { host: '127.0.0.1', port: 0 } };
    const log = captureLog();
    daemon = await startDaemon(config, {
      openKernel: async () => FakeKernel.withInterface(),
      logger: log.logger,
      readTokenFile: files.read,
    });
    return { daemon, log };
  }

  it('replaces both scopes from the files and logs how many of each', async () => {
    const files = new Files();
    files.set('/etc/wg-peerd/admin.tokens', `${OLD_ADMIN}\n`);
    files.set('/etc/wg-peerd/read.tokens', `${OLD_READ}\n`);
    const { daemon, log } = await start(files);
    expect(await status(daemon, 'POST', '/api/peer', OLD_ADMIN)).to.equal(201);

    // Rotation: the new admin token next to the old one first, then the old one goes.
    files.set('/etc/wg-peerd/admin.tokens', `# rotating\n${OLD_ADMIN}\n${NEW_ADMIN}\n`);
    files.set('/etc/wg-peerd/read.tokens', `${NEW_READ}\n`);
    expect(daemon.reloadTokens()).to.equal(true);
    expect(await status(daemon, 'POST', '/api/peer', OLD_ADMIN)).to.equal(201);
    expect(await status(daemon, 'POST', '/api/peer', NEW_ADMIN)).to.equal(201);
    expect(await status(daemon, 'GET', '/api/peers', NEW_READ)).to.equal(200);
    expect(await status(daemon, 'GET', '/api/peers', OLD_READ)).to.equal(401);
    expect(await status(daemon, 'POST', '/api/peer', NEW_READ)).to.equal(403);

    files.set('/etc/wg-peerd/admin.tokens', `${NEW_ADMIN}\n`);
    expect(daemon.reloadTokens()).to.equal(true);
    expect(await status(daemon, 'GET', '/api/peers', OLD_ADMIN)).to.equal(401);
    expect(await status(daemon, 'GET', '/api/peers', NEW_ADMIN)).to.equal(200);

    const reloads = log.lines().filter((l) => l['event'] === 'tokens_reloaded');
    expect(reloads.map((l) => [l['level'], l['admin'], l['read']])).to.deep.equal([
      [30, 2, 1],
      [30, 1, 1],
    ]);
    expect(log.text()).to.not.contain(NEW_ADMIN).and.not.contain(OLD_READ);
  });

  const failures: Array<[string, (files: Files) => void, RegExp]> = [
    [
      'a file made readable by others',
      (files) => files.set('/etc/wg-peerd/admin.tokens', `${NEW_ADMIN}\n`, 0o644),
      /--token-file \/etc\/wg-peerd\/admin.tokens may be read by group or others \(mode 0644\)/,
    ],
    [
      'a short token',
      (files) => files.set('/etc/wg-peerd/read.tokens', `${NEW_READ}\nshort\n`),
      /--read-token-file \/etc\/wg-peerd\/read.tokens line 2 holds a token of 5 characters/,
    ],
    [
      'a deleted file',
      (files) => files.content.delete('/etc/wg-peerd/read.tokens'),
      /cannot be read \(ENOENT\)/,
    ],
    ['an emptied file', (files) => files.set('/etc/wg-peerd/admin.tokens', '\n'), /holds no token/],
  ];
  for (const [what, breakIt, reason] of failures) {
    it(`keeps the old tokens after ${what}, and logs why at warn`, async () => {
      const files = new Files();
      files.set('/etc/wg-peerd/admin.tokens', `${OLD_ADMIN}\n`);
      files.set('/etc/wg-peerd/read.tokens', `${OLD_READ}\n`);
      const { daemon, log } = await start(files);
      breakIt(files);
      expect(daemon.reloadTokens()).to.equal(false);
      expect(await status(daemon, 'POST', '/api/peer', OLD_ADMIN)).to.equal(201);
      expect(await status(daemon, 'GET', '/api/peers', OLD_READ)).to.equal(200);
      expect(await status(daemon, 'GET', '/api/peers', NEW_ADMIN)).to.equal(401);
      const failed = log.lines().find((l) => l['event'] === 'tokens_reload_failed');
      expect(failed?.['level']).to.equal(40);
      expect(String(failed?.['reason'])).to.match(reason);
    });
  }
});

// Issue 20: --webhooks-file is read at start (a bad one stops it with exit status 2) and again
// on SIGHUP (a bad one keeps the old targets and says why).
describe('webhooks file (start and SIGHUP)', () => {
  const SECRET = `whsec_${Buffer.alloc(32, 3).toString('base64')}`;
  let daemon: Daemon | undefined;
  afterEach(async () => {
    await daemon?.shutdown();
    daemon = undefined;
  });

  function config(): Config {
    const outcome = parseConfig(['--webhooks-file', '/etc/wg-peerd/webhooks'], {}, () => {
      throw new Error('no token file');
    });
    if (outcome.kind !== 'run') throw new Error('expected a configuration');
    return { ...outcome.config, listen: { host: '127.0.0.1', port: 0 } };
  }

  /** A daemon started with one webhook target in a good file. */
  async function startWithWebhooks() {
    const files = new Files();
    files.set('/etc/wg-peerd/webhooks', `https://a.example/ ${SECRET}\n`);
    const log = captureLog();
    daemon = await startDaemon(config(), {
      openKernel: async () => FakeKernel.withInterface(),
      logger: log.logger,
      readTokenFile: files.read,
    });
    return { files, log, started: daemon };
  }

  it('stops the start with exit status 2 and one line for a file others may read', async () => {
    const files = new Files();
    files.set('/etc/wg-peerd/webhooks', `https://hooks.example/ ${SECRET}\n`, 0o644);
    let error: unknown;
    try {
      daemon = await startDaemon(config(), {
        openKernel: async () => FakeKernel.withInterface(),
        logger: captureLog().logger,
        readTokenFile: files.read,
      });
    } catch (e) {
      error = e;
    }
    expect(error).to.include({ exitStatus: 2 });
    expect((error as Error).message).to.match(/--webhooks-file .* may be read by group or others/);
  });

  it('re-reads the targets on SIGHUP; a broken file keeps the old ones, logged at warn', async () => {
    const { files, log, started } = await startWithWebhooks();
    files.set(
      '/etc/wg-peerd/webhooks',
      `https://a.example/ ${SECRET}\nhttps://b.example/ ${SECRET}\n`,
    );
    expect(started.reloadWebhooks()).to.equal(true);
    expect(log.lines().find((l) => l.event === 'webhooks_reloaded')).to.include({ targets: 2 });
    files.set('/etc/wg-peerd/webhooks', 'https://c.example/ not-a-secret\n');
    expect(started.reloadWebhooks()).to.equal(false);
    const warning = log.lines().find((l) => l.event === 'webhooks_reload_failed');
    expect(String(warning?.reason)).to.match(/line 1: the secret must be whsec_/);
  });

  it('says nothing of tokens on a SIGHUP when the webhooks file is what there is to re-read', async () => {
    const { log, started } = await startWithWebhooks();
    // The start warns once that there is no token (issue 30); the SIGHUP adds no warning.
    const atStart = log.lines().length;
    expect(started.reloadTokens()).to.equal(false);
    expect(started.reloadWebhooks()).to.equal(true);
    expect(
      log
        .lines()
        .slice(atStart)
        .filter((l) => l.level === 40),
    ).to.deep.equal([]);
  });

  it('warns on a SIGHUP that finds nothing at all to re-read', async () => {
    const outcome = parseConfig([], {}, () => {
      throw new Error('no token file');
    });
    if (outcome.kind !== 'run') throw new Error('expected a configuration');
    const log = captureLog();
    daemon = await startDaemon(
      { ...outcome.config, listen: { host: '127.0.0.1', port: 0 } },
      { openKernel: async () => FakeKernel.withInterface(), logger: log.logger },
    );
    expect(daemon.reloadTokens()).to.equal(false);
    const warning = log.lines().find((l) => l.event === 'tokens_not_reloaded');
    expect(warning?.level).to.equal(40);
    expect(String(warning?.msg)).to.contain('nothing to re-read');
  });
});
