import { expect } from 'chai';
import { spawnSync } from 'node:child_process';
import path from 'node:path';

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

// DESIGN §4: bad configuration stops the start with one clear line and exit status 2.
describe('wg-peerd process: configuration errors', function () {
  // Each case starts a Node.js process; a loaded machine needs more than mocha's default.
  this.timeout(30_000);

  const cases: Array<[string, string[], Record<string, string>, RegExp]> = [
    ['an unknown flag', ['--bogus'], {}, /unknown option --bogus/],
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
    ['a bad listen port', ['--listen-port', '0'], {}, /port number/],
    ['a bad address', [], { WG_PEERD_ADDRESS: '10.8.0.0/24' }, /network address/],
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
    });
  }

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
    ]) {
      expect(result.stdout).to.contain(name);
    }
  });
});
