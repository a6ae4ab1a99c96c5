import { expect } from 'chai';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { OPTIONS, parseConfig } from '../../../src/config';

const ROOT = path.resolve(__dirname, '../../../..');
const UNIT = path.join(ROOT, 'contrib', 'systemd', 'wg-peerd.service');
/** The template: one daemon per interface (issue 32). */
const TEMPLATE = path.join(ROOT, 'contrib', 'systemd', 'wg-peerd@.service');
/** The command `npm install -g` of the release tarball puts on PATH (package.json `bin`). */
const INSTALLED_COMMAND = 'wg-peerd';
/** V8 flags of the daemon process (README, Performance: why single-threaded GC). */
const DAEMON_NODE_FLAGS = '--single-threaded-gc --max-semi-space-size=8 --heap-growing-percent=50';

function hasSystemdAnalyze(): boolean {
  return spawnSync('systemd-analyze', ['--version'], { encoding: 'utf8' }).status === 0;
}

/**
 * `systemd-analyze <command>` of a copy of `unit` with ExecStart rewritten by `rewrite`; a
 * template is asked for its instance `wg1`.
 */
function analyze(command: string[], rewrite: (execStart: string) => string, unit: string = UNIT) {
  const dir = mkdtempSync(path.join(tmpdir(), 'wg-peerd-unit-'));
  try {
    const text = readFileSync(unit, 'utf8').replace(
      /^ExecStart=(.*)$/m,
      (_line, execStart: string) => `ExecStart=${rewrite(execStart)}`,
    );
    const name = path.basename(unit);
    writeFileSync(path.join(dir, name), text);
    const asked = path.join(dir, name.replace('@.', '@wg1.'));
    return spawnSync('systemd-analyze', [...command, asked], {
      cwd: dir,
      encoding: 'utf8',
      timeout: 60_000,
    });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** `systemd-analyze verify` of a copy of the unit with ExecStart rewritten by `rewrite`. */
function verify(rewrite: (execStart: string) => string, unit: string = UNIT) {
  return analyze(['verify'], rewrite, unit);
}

/** ExecStart pointed at this node and this build (the installed command exists only once installed). */
function thisBuild(command: string): string {
  return command.replace(
    new RegExp(`^${INSTALLED_COMMAND} `),
    `${process.execPath} ${DAEMON_NODE_FLAGS} ${path.join(ROOT, 'dist', 'src', 'main.js')} `,
  );
}

/** Every `Key=value` of the [Service] section, values of repeated keys joined by a space. */
function serviceSettings(unit: string = UNIT): Map<string, string> {
  const text = readFileSync(unit, 'utf8');
  const section = text.slice(text.indexOf('[Service]'), text.indexOf('[Install]'));
  const settings = new Map<string, string>();
  for (const line of section.split('\n')) {
    const match = /^([A-Za-z]+)=(.*)$/.exec(line);
    if (match === null) continue;
    const [, key, value] = match;
    settings.set(key!, settings.has(key!) ? `${settings.get(key!)} ${value!}` : value!);
  }
  return settings;
}

// Issue 9 "Packaging": a hardened unit running as a dedicated user with CAP_NET_ADMIN only.
describe('contrib/systemd/wg-peerd.service', function () {
  this.timeout(120_000);

  it('runs as the user wg-peerd with CAP_NET_ADMIN alone and the hardening of issue 9', () => {
    const settings = serviceSettings();
    const expected: Record<string, string> = {
      User: 'wg-peerd',
      AmbientCapabilities: 'CAP_NET_ADMIN',
      CapabilityBoundingSet: 'CAP_NET_ADMIN',
      NoNewPrivileges: 'yes',
      ProtectSystem: 'strict',
      ProtectHome: 'yes',
      PrivateTmp: 'yes',
      RestrictAddressFamilies: 'AF_NETLINK AF_INET AF_INET6 AF_UNIX',
      Restart: 'on-failure',
      EnvironmentFile: '-/etc/default/wg-peerd',
      ExecReload: '/bin/kill -HUP $MAINPID',
    };
    for (const [key, value] of Object.entries(expected)) {
      expect(settings.get(key), key).to.equal(value);
    }
    // The installed command itself, found by systemd in /usr/local/bin or /usr/bin; its shebang
    // carries the daemon's node flags (checked below).
    expect(settings.get('ExecStart')).to.equal(`${INSTALLED_COMMAND} $WG_PEERD_ARGS`);
  });

  it('keeps a private state directory, /var/lib/wg-peerd, that the daemon is told of (issue 16)', () => {
    const settings = serviceSettings();
    expect(settings.get('StateDirectory')).to.equal('wg-peerd');
    expect(settings.get('StateDirectoryMode')).to.equal('0700');
    expect(settings.get('Environment')).to.equal('WG_PEERD_STATE_DIR=/var/lib/wg-peerd');
  });

  it('passes systemd-analyze verify, without a word about our unit', function () {
    if (!hasSystemdAnalyze()) {
      // CI installs systemd; a developer machine without it cannot run this check.
      this.skip();
    }
    // verify checks that ExecStart's binary exists: point the copy at this node and this build,
    // with the flags of the command's shebang (the command exists only once installed).
    const result = verify(thisBuild);
    const said = `${result.stdout}${result.stderr}`;
    expect(result.status, said).to.equal(0);
    expect(said.split('\n').filter((line) => line.includes('wg-peerd'))).to.deep.equal([]);
  });

  it('is checked for real: a copy whose binary does not exist fails verify, naming the unit', function () {
    if (!hasSystemdAnalyze()) this.skip();
    const result = verify(() => '/nonexistent/node /nonexistent/main.js');
    expect(result.status).to.not.equal(0);
    expect(`${result.stdout}${result.stderr}`).to.contain('wg-peerd.service');
  });
});

/** `systemd-analyze security --offline` exposure of a unit (systemd >= 250), or null. */
function exposure(unit: string): number | null {
  const result = analyze(['security', '--offline=true'], thisBuild, unit);
  const match = /Overall exposure level for \S+: (\d+(?:\.\d+)?)/.exec(
    `${result.stdout}${result.stderr}`,
  );
  return match === null ? null : Number(match[1]);
}

// Issue 32: systemd knows when the VPN is up, restarts a daemon that hangs, and the unit uses
// every hardening option that CAP_NET_ADMIN and netlink allow.
describe('contrib/systemd: Type=notify, the watchdog, hardening, the template (issue 32)', function () {
  this.timeout(120_000);

  it('is Type=notify with a watchdog, the daemon pinging at half of it (src/systemd-notify.ts)', () => {
    for (const unit of [UNIT, TEMPLATE]) {
      const settings = serviceSettings(unit);
      expect(settings.get('Type'), unit).to.equal('notify');
      expect(settings.get('WatchdogSec'), unit).to.equal('30s');
      // The notification is an AF_UNIX datagram: the family must stay allowed.
      expect(settings.get('RestrictAddressFamilies'), unit).to.contain('AF_UNIX');
      expect(settings.get('NotifyAccess'), unit).to.equal(undefined); // main: the daemon itself
    }
  });

  it('comments every hardening option', () => {
    for (const unit of [UNIT, TEMPLATE]) {
      const text = readFileSync(unit, 'utf8');
      // From the blank line before the capabilities to [Install]: each setting in a run of
      // lines that a comment opens.
      const lines = text.slice(0, text.indexOf('[Install]')).split('\n');
      const start = lines.lastIndexOf(
        '',
        lines.findIndex((l) => l.startsWith('AmbientCap')),
      );
      const block = lines.slice(start);
      let commented = false;
      const bare: string[] = [];
      for (const line of block) {
        if (line.startsWith('#')) commented = true;
        else if (line.trim() === '') commented = false;
        else if (!commented) bare.push(line);
      }
      expect(block.filter((line) => /^[A-Z]\w+=/.test(line)).length).to.be.greaterThan(20);
      expect(bare, unit).to.deep.equal([]);
    }
  });

  it('has a systemd-analyze security exposure of at most 2.5, both units', function () {
    const plain = exposure(UNIT);
    if (plain === null) this.skip(); // no systemd-analyze, or one older than --offline (250)
    expect(plain).to.be.at.most(2.5);
    expect(exposure(TEMPLATE)).to.be.at.most(2.5);
  });

  it('has a template that differs from the plain unit only where it names the instance', () => {
    const plain = serviceSettings(UNIT);
    const template = serviceSettings(TEMPLATE);
    const differ = [...new Set([...plain.keys(), ...template.keys()])].filter(
      (key) => plain.get(key) !== template.get(key),
    );
    expect(differ.sort()).to.deep.equal(
      ['EnvironmentFile', 'ExecStart', 'Environment', 'StateDirectory'].sort(),
    );
    // Its own interface (a flag, which its environment file cannot override), state directory
    // and environment file, which it needs: two instances must differ in their ports.
    expect(template.get('ExecStart')).to.equal(
      `${INSTALLED_COMMAND} --interface %i $WG_PEERD_ARGS`,
    );
    expect(template.get('StateDirectory')).to.equal('wg-peerd-%i');
    expect(template.get('Environment')).to.equal('WG_PEERD_STATE_DIR=/var/lib/wg-peerd-%i');
    expect(template.get('EnvironmentFile')).to.equal('/etc/default/wg-peerd-%i');
  });

  it('passes systemd-analyze verify for an instance of the template, without a word about it', function () {
    if (!hasSystemdAnalyze()) this.skip();
    const result = verify(thisBuild, TEMPLATE);
    const said = `${result.stdout}${result.stderr}`;
    expect(result.status, said).to.equal(0);
    expect(said.split('\n').filter((line) => line.includes('wg-peerd'))).to.deep.equal([]);
    const broken = verify(() => '/nonexistent/node /nonexistent/main.js', TEMPLATE);
    expect(broken.status).to.not.equal(0);
    expect(`${broken.stdout}${broken.stderr}`).to.contain('wg-peerd@wg1.service');
  });
});

/** The `VAR=value` lines of the environment file, commented out (`#VAR=`) or not. */
function defaultFileLines(): Array<{ name: string; value: string; commented: boolean }> {
  const text = readFileSync(path.join(ROOT, 'contrib', 'systemd', 'wg-peerd.default'), 'utf8');
  return [...text.matchAll(/^(#?)([A-Z][A-Z0-9_]*)=(.*)$/gm)].map((m) => ({
    name: m[2]!,
    value: m[3]!,
    commented: m[1] === '#',
  }));
}

// Issue 32: the environment file lacked 7 of the 20 settings while the README said all were there.
describe('contrib/systemd/wg-peerd.default', () => {
  it('sets only variables wg-peerd knows, or WG_PEERD_ARGS of the unit', () => {
    const help = spawnSync(
      process.execPath,
      [path.join(ROOT, 'dist', 'src', 'main.js'), '--help'],
      {
        encoding: 'utf8',
      },
    ).stdout;
    const names = defaultFileLines().map((line) => line.name);
    expect(names.length).to.be.greaterThan(4);
    for (const name of names) {
      if (name !== 'WG_PEERD_ARGS') expect(help, name).to.contain(name);
    }
  });

  it('has every setting of the option table once, and WG_PEERD_ARGS', () => {
    const names = defaultFileLines().map((line) => line.name);
    const table = Object.values(OPTIONS).map((option) => option.env);
    expect(table).to.have.length.greaterThan(19);
    expect([...names].sort()).to.deep.equal([...table, 'WG_PEERD_ARGS'].sort());
  });

  it('shows each setting that has a default commented out at exactly that default', () => {
    const lines = new Map(defaultFileLines().map((line) => [line.name, line]));
    for (const option of Object.values(OPTIONS)) {
      const line = lines.get(option.env)!;
      if (option.default === null || !line.commented) continue;
      expect(line.value, option.env).to.equal(option.default);
    }
  });

  it('is a configuration wg-peerd starts with as it stands (the lines not commented out)', () => {
    const env = Object.fromEntries(
      defaultFileLines()
        .filter((line) => !line.commented && line.name !== 'WG_PEERD_ARGS')
        .map((line) => [line.name, line.value]),
    );
    expect(Object.keys(env)).to.include.members(['WG_PEERD_INTERFACE', 'WG_PEERD_LISTEN']);
    const outcome = parseConfig([], env, () => {
      throw new Error('no token file is named by a variable');
    });
    expect(outcome.kind).to.equal('run');
  });
});

describe('the node flags the daemon runs with', () => {
  // src/main.ts imports nothing that could set them: V8 takes --single-threaded-gc only at
  // start (set later through v8.setFlagsFromString, it aborts the process at the next GC).
  it('are the same wherever it is started: npm start, the executable, the unit, the bench', () => {
    const pkg = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as {
      scripts: Record<string, string>;
    };
    expect(pkg.scripts['start']).to.equal(`node ${DAEMON_NODE_FLAGS} dist/src/main.js`);
    const shebang = readFileSync(path.join(ROOT, 'src', 'main.ts'), 'utf8').split('\n')[0];
    expect(shebang).to.equal(`#!/usr/bin/env -S node ${DAEMON_NODE_FLAGS}`);
    // bench/api.ts starts the daemon with the flags of `npm start`, which bench/support.ts reads.
    expect(readFileSync(path.join(ROOT, 'bench', 'support.ts'), 'utf8')).to.contain(
      "pkg.scripts['start']",
    );
    expect(readFileSync(path.join(ROOT, 'bench', 'api.ts'), 'utf8')).to.contain(
      'startNodeFlags(`${checkout}/dist`)',
    );
  });
});
