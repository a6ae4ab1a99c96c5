import { expect } from 'chai';
import { spawnSync } from 'node:child_process';
import { chmodSync, copyFileSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { TestPki } from '../../support/pki';

// The built binary (package.json "bin"): dist/src/main.js next to dist/test/unit/config/.
const MAIN = path.resolve(__dirname, '../../../src/main.js');

function run(args: string[], env: Record<string, string> = {}) {
  const clean = Object.fromEntries(
    Object.entries(process.env).filter(([name]) => !name.startsWith('WG_PEERD_')),
  );
  return spawnSync(process.execPath, [MAIN, ...args], {
    env: { ...clean, ...env },
    encoding: 'utf8',
    timeout: 20_000,
  });
}

/** Real token files with real permission bits, for the checks made through fstat. */
const TOKENS = mkdtempSync(path.join(tmpdir(), 'wg-peerd-tokens-'));
function tokenFile(name: string, text: string, mode: number): string {
  const file = path.join(TOKENS, name);
  writeFileSync(file, text);
  chmodSync(file, mode); // not subject to the umask, unlike the mode of writeFileSync
  return file;
}

/** Real TLS files (issue 22), made by openssl. */
const PKI = new TestPki();
const CA = PKI.ca('process-ca');
const SERVER = PKI.issue(CA, 'server', '/CN=vpn1.example.net', 'server');
function exposedKey(): string {
  const file = PKI.file('exposed.key');
  copyFileSync(SERVER.key, file);
  chmodSync(file, 0o644);
  return file;
}

// DESIGN §4: bad configuration stops the start with one clear line and exit status 2.
describe('wg-peerd process: configuration errors', function () {
  // Each case starts a Node.js process; a loaded machine needs more than mocha's default.
  this.timeout(30_000);

  const cases: Array<[string, string[], Record<string, string>, RegExp]> = [
    ['an unknown flag', ['--bogus'], {}, /unknown option --bogus/],
    ['a value given to --version', ['--version=1'], {}, /--version takes no value/],
    [
      'a non-loopback listen address without token',
      ['--listen', '0.0.0.0:8080'],
      {},
      /without authentication/,
    ],
    [
      'a non-loopback address from the environment',
      [],
      { WG_PEERD_LISTEN: '[::]:8080' },
      /without authentication/,
    ],
    ['a missing token file', ['--token-file', '/nonexistent/token'], {}, /cannot be read/],
    [
      'a token file readable by others (mode 0644 on disk)',
      ['--token-file', tokenFile('open.tokens', 'admin-token-0123456789abcdef\n', 0o644)],
      {},
      /open\.tokens may be read by group or others \(mode 0644\): chmod 600/,
    ],
    [
      'a read token file readable by its group (mode 0640 on disk)',
      ['--read-token-file', tokenFile('group.tokens', 'read-token-0123456789abcdef\n', 0o640)],
      {},
      /group\.tokens may be read by group or others \(mode 0640\)/,
    ],
    [
      'a private token file with a short token',
      ['--token-file', tokenFile('short.tokens', 'hunter2\n', 0o600)],
      {},
      /short\.tokens line 1 holds a token of 7 characters; tokens need at least 16/,
    ],
    ['a short WG_PEERD_TOKEN', [], { WG_PEERD_TOKEN: 'hunter2' }, /at least 16/],
    [
      'an unknown WG_PEERD_ variable (issue 30)',
      [],
      { WG_PEERD_TOKEN_FILE: '/etc/wg-peerd/hunter2' },
      /unknown environment variable WG_PEERD_TOKEN_FILE .*did you mean WG_PEERD_TOKEN\?/,
    ],
    [
      '--max-event-streams not below --max-connections (issue 30)',
      ['--max-connections', '10', '--max-event-streams', '10'],
      {},
      /--max-event-streams \(10\) must be below --max-connections \(10\)/,
    ],
    ['a bad log level', [], { WG_PEERD_LOG_LEVEL: 'loud' }, /WG_PEERD_LOG_LEVEL must be one of/],
    ['a bad listen port', ['--listen-port', '0'], {}, /port number/],
    ['a bad address', [], { WG_PEERD_ADDRESS: '10.8.0.0/24' }, /network address/],
    ['--tls-cert without --tls-key', ['--tls-cert', SERVER.cert], {}, /--tls-cert needs --tls-key/],
    [
      'a TLS certificate that cannot be read',
      ['--tls-cert', PKI.file('absent.pem'), '--tls-key', SERVER.key],
      {},
      /--tls-cert \S+absent\.pem cannot be read \(ENOENT\)/,
    ],
    [
      'a TLS key readable by others (mode 0644 on disk)',
      [],
      { WG_PEERD_TLS_CERT: SERVER.cert, WG_PEERD_TLS_KEY: exposedKey() },
      /exposed\.key may be read by group or others \(mode 0644\): chmod 600/,
    ],
    [
      'a TLS certificate file that holds no PEM certificate',
      ['--tls-cert', SERVER.key, '--tls-key', SERVER.key],
      {},
      /--tls-cert \S+server\.key holds no PEM certificate/,
    ],
  ];
  for (const [what, args, env, pattern] of cases) {
    it(`exits 2 with one line on stderr for ${what}`, () => {
      const result = run(args, env);
      expect(result.status, result.stderr).to.equal(2);
      const lines = result.stderr.split('\n').filter((l) => l !== '');
      expect(lines).to.have.length(1);
      expect(lines[0])
        .to.match(/^wg-peerd: /)
        .and.match(pattern);
      expect(result.stdout).to.equal('');
      expect(result.stderr).to.not.contain('hunter2');
    });
  }

  it('prints the version of package.json for --version and exits 0', () => {
    const manifest = JSON.parse(
      readFileSync(path.resolve(__dirname, '../../../../package.json'), 'utf8'),
    ) as { version: string };
    const result = run(['--version']);
    expect(result.status, result.stderr).to.equal(0);
    expect(result.stdout).to.equal(`wg-peerd ${manifest.version}\n`);
  });

  it('prints the configuration table for --help and exits 0', () => {
    const result = run(['--help']);
    expect(result.status).to.equal(0);
    for (const name of [
      '--interface',
      '--listen',
      '--endpoint-host',
      '--token-file',
      '--address',
      '--listen-port',
      '--allow-unauthenticated',
      'WG_PEERD_INTERFACE',
      'WG_PEERD_LISTEN',
      'WG_PEERD_ENDPOINT_HOST',
      'WG_PEERD_TOKEN',
      'WG_PEERD_ADDRESS',
      'WG_PEERD_LISTEN_PORT',
      'WG_PEERD_ALLOW_UNAUTHENTICATED',
      '--read-token-file',
      'WG_PEERD_READ_TOKEN',
      '--log-level',
      'WG_PEERD_LOG_LEVEL',
      '--version',
    ]) {
      expect(result.stdout).to.contain(name);
    }
  });
});
