import { expect } from 'chai';
import { spawnSync } from 'node:child_process';
import { chmodSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import sinon from 'sinon';
import { startDaemon, type Daemon } from '../../../src/main';
import type { ReadTokenFile } from '../../../src/token-files';
import { testConfig } from '../support/config';
import { FakeKernel } from '../support/fake-kernel';
import { captureLog } from '../support/log-capture';

// The built binary (package.json "bin"): dist/src/main.js next to dist/test/unit/config/.
const MAIN = path.resolve(__dirname, '../../../src/main.js');
const DIR = mkdtempSync(path.join(tmpdir(), 'wg-peerd-webhooks-'));

/** The secret's text after whsec_: none of it may show anywhere. */
const SECRET_BODY = Buffer.alloc(32, 0x5a).toString('base64');
const SECRET = `whsec_${SECRET_BODY}`;
const PASSWORD = 'Pa55w0rd-of-the-receiver';

/**
 * Issue 30, done-when 3: every kind of refused webhooks-file line, each on line 3 of its file
 * (after a comment and a good target), with what its message says.
 */
const REFUSED: Array<[string, string, RegExp]> = [
  [
    'a URL with userinfo',
    `https://hooks:${PASSWORD}@hooks.example/in ${SECRET}`,
    /line 3: the URL carries a user name or password \(user:pass@\)/,
  ],
  [
    'a URL with a user name alone (an API key as the user)',
    `https://${PASSWORD}@hooks.example/in ${SECRET}`,
    /line 3: the URL carries a user name or password \(user:pass@\)/,
  ],
  [
    'swapped fields (the secret where the URL belongs)',
    `${SECRET} https://hooks.example/in`,
    /line 3: the first field holds a secret \(whsec_\.\.\.\) where the URL belongs/,
  ],
  [
    'a secret in the URL',
    `https://hooks.example/in?secret=${SECRET} ${SECRET}`,
    /line 3: the URL holds a secret \(whsec_\.\.\.\)/,
  ],
  [
    'the secret in the types field',
    `https://hooks.example/in peer.created ${SECRET}`,
    /line 3: the third field holds a secret/,
  ],
  [
    'a secret that is not whsec_<base64>',
    `https://hooks.example/in ${SECRET_BODY}`,
    /line 3: the secret must be whsec_<base64>/,
  ],
  [
    'a secret too short',
    `https://hooks.example/in whsec_${SECRET_BODY.slice(0, 12)}`,
    /line 3: the secret holds 9 bytes; it needs at least 16/,
  ],
];

function fileText(line: string): string {
  return `# targets\nhttps://good.example/in whsec_${Buffer.alloc(32, 1).toString('base64')}\n${line}\n`;
}

function expectNoSecret(text: string, what: string): void {
  expect(text, what).to.not.include(SECRET_BODY.slice(0, 16));
  expect(text, what).to.not.include(SECRET_BODY.slice(-16));
  expect(text, what).to.not.include(PASSWORD);
}

describe('webhooks file: a refused line never shows its secret (issue 30)', function () {
  // Each start case runs a Node.js process; a loaded machine needs more than mocha's default.
  this.timeout(30_000);

  for (const [what, line, message] of REFUSED) {
    it(`at start: ${what} is exit 2, one line naming file and line, the secret neither on stdout nor stderr`, () => {
      const file = path.join(DIR, `${what.replace(/\W+/g, '-')}.webhooks`);
      writeFileSync(file, fileText(line));
      chmodSync(file, 0o600);
      const clean = Object.fromEntries(
        Object.entries(process.env).filter(([name]) => !name.startsWith('WG_PEERD_')),
      );
      const result = spawnSync(process.execPath, [MAIN, '--webhooks-file', file], {
        env: clean,
        encoding: 'utf8',
        timeout: 20_000,
      });
      expect(result.status, result.stderr).to.equal(2);
      const lines = result.stderr.split('\n').filter((l) => l !== '');
      expect(lines).to.have.length(1);
      expect(lines[0]).to.include(`--webhooks-file ${file} line 3`).and.match(message);
      // stdout is the log (pino): the start's fatal line is there, without the secret either.
      expectNoSecret(result.stdout, 'stdout');
      expectNoSecret(result.stderr, 'stderr');
    });
  }

  describe('at SIGHUP', () => {
    let daemon: Daemon | null = null;
    afterEach(async () => {
      await daemon?.shutdown();
      daemon = null;
    });

    it('keeps the old targets for each refused line, logs file and line at warn, and never the secret, neither in the log nor on stdout or stderr', async () => {
      const files = new Map<string, string>([['/etc/wg-peerd/webhooks', fileText('')]]);
      const read: ReadTokenFile = (file) => ({ text: files.get(file)!, mode: 0o100600 });
      const log = captureLog();
      daemon = await startDaemon(testConfig({ webhooksFile: '/etc/wg-peerd/webhooks' }), {
        openKernel: async () => FakeKernel.withInterface(),
        logger: log.logger,
        readTokenFile: read,
      });
      // What the process itself writes while reloading, besides the log.
      const written: string[] = [];
      const spies = [process.stdout, process.stderr].map((stream) =>
        sinon.stub(stream, 'write').callsFake((chunk: string | Uint8Array) => {
          written.push(String(chunk));
          return true;
        }),
      );
      const results: boolean[] = [];
      try {
        for (const [, line] of REFUSED) {
          files.set('/etc/wg-peerd/webhooks', fileText(line));
          results.push(daemon.reloadWebhooks());
        }
      } finally {
        for (const spy of spies) spy.restore();
      }
      expect(results).to.deep.equal(REFUSED.map(() => false));
      expectNoSecret(written.join(''), 'stdout and stderr');
      const warnings = log.lines().filter((l) => l.event === 'webhooks_reload_failed');
      expect(warnings).to.have.length(REFUSED.length);
      for (const [i, [what, , message]] of REFUSED.entries()) {
        const warning = warnings[i]!;
        expect(warning, what).to.include({ event: 'webhooks_reload_failed', level: 40 });
        expect(String(warning.msg), what)
          .to.include('--webhooks-file /etc/wg-peerd/webhooks line 3')
          .and.match(message);
      }
      expectNoSecret(log.text(), 'the log');
    });
  });
});
