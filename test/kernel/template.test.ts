/**
 * Issue 32, done-when 2: two instances of the template unit contrib/systemd/wg-peerd@.service,
 * wg0 and wg1, side by side on one host. The test VM has no systemd as PID 1 (scripts/vm/run.sh
 * boots a busybox init and chroots into the host's root). A user manager (`systemd --user`) does
 * run there and test/kernel/systemd.test.ts runs the plain unit under it, but a user manager
 * cannot take User= (its services run as its own user), and what this test checks is the
 * instances as the unit's user; so this test does what the system manager would do with the
 * unit file as written, for each instance: %i expanded to the instance
 * name (systemd.unit(5), Specifiers), the Environment= lines, then the EnvironmentFile= the
 * template names (/etc/default/wg-peerd-%i, which overrides them: systemd.exec(5)), the
 * StateDirectory= made owned by the unit's user with StateDirectoryMode=, and ExecStart= run as
 * written, `$VAR` split at whitespace into words (systemd.service(5), Command lines), under the
 * unit's user and capabilities (setpriv, as test/kernel/nonroot.test.ts). The two environment
 * files are made as the README's "One daemon per interface" says: wg0's a copy of
 * wg-peerd.default, wg1's the README's own sed command. What differs from a real host, each said
 * where it happens: `nobody` stands in for the user wg-peerd (the guest shares the host's
 * /etc/passwd, read-only), /etc/default and /var/lib are tmpfs for the test (the host's are
 * read-only here), the token files live under /tmp, and `wg-peerd` is this build's
 * dist/src/main.js (the command package.json's `bin` installs).
 */
import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import {
  chmodSync,
  chownSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import path from 'node:path';
import { type DaemonProcess, api, startDaemon } from './support/daemon';
import {
  SERVER_UNDERLAY_IP,
  assertInTestVm,
  removeDaemonLeftovers,
  sh,
  trySh,
  wgShowDump,
} from './support/topology';

const REPO = path.resolve(__dirname, '..', '..', '..');
const TEMPLATE = path.join(REPO, 'contrib', 'systemd', 'wg-peerd@.service');
const DEFAULTS = path.join(REPO, 'contrib', 'systemd', 'wg-peerd.default');
const INSTANCES = ['wg0', 'wg1'] as const;
/** `nobody` of the host's /etc/passwd: the unit's User=wg-peerd does not exist in the guest. */
const UID = 65534;
const GID = 65534;
/** CAP_NET_ADMIN is capability 12 (linux/capability.h): the only bit the daemon may hold. */
const CAP_NET_ADMIN_MASK = (1n << 12n).toString(16).padStart(16, '0');
const ADMIN_TOKEN = 'template-admin-token-0123456789';
/** The base environment systemd gives a system service (systemd.exec(5), Environment variables). */
const SERVICE_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

/** Every `Key=value` of the [Service] section, in order (a key may repeat). */
function serviceLines(unit: string): Array<[string, string]> {
  const start = unit.indexOf('\n[Service]\n');
  const end = unit.indexOf('\n[', start + 1);
  return unit
    .slice(start, end)
    .split('\n')
    .filter((line) => /^[A-Za-z]+=/.test(line))
    .map((line) => [line.slice(0, line.indexOf('=')), line.slice(line.indexOf('=') + 1)]);
}

/** %i and %% as systemd expands them for an instance whose name needs no unescaping. */
function expand(value: string, instance: string): string {
  return value.replace(/%(.)/g, (_all, letter: string) => {
    if (letter === 'i') return instance;
    if (letter === '%') return '%';
    throw new Error(`the template uses %${letter}, which this test does not expand: teach it`);
  });
}

/** One setting of the template for `instance`, expanded; throws unless it is there exactly once. */
function setting(lines: Array<[string, string]>, key: string, instance: string): string {
  const found = lines.filter(([k]) => k === key);
  expect(found, key).to.have.lengthOf(1);
  return expand(found[0]![1], instance);
}

/**
 * An environment file as systemd reads it (systemd.exec(5), EnvironmentFile=): one KEY=VALUE a
 * line, lines starting with # or ; are comments, blanks are skipped, a value in matching quotes
 * loses them. The files here use nothing else: a backslash continuation would fail the test.
 */
function readEnvironmentFile(file: string): Record<string, string> {
  const env: Record<string, string> = {};
  for (const raw of readFileSync(file, 'utf8').split('\n')) {
    const line = raw.trim();
    if (line === '' || line.startsWith('#') || line.startsWith(';')) continue;
    expect(line, `${file}: a line this test can read as systemd would`).to.match(
      /^[A-Za-z_][A-Za-z0-9_]*=[^\\]*$/,
    );
    const key = line.slice(0, line.indexOf('='));
    let value = line.slice(line.indexOf('=') + 1).trim();
    if (/^(["']).*\1$/.test(value)) value = value.slice(1, -1);
    env[key] = value;
  }
  return env;
}

/**
 * ExecStart= as systemd splits it: words at whitespace, `$NAME` alone as a word becomes the
 * variable's value split at whitespace (none when empty or unset). Quotes and `${NAME}` are not
 * in the template; the test fails if they appear rather than guess.
 */
function commandLine(execStart: string, env: Record<string, string>): string[] {
  expect(execStart).to.not.match(/["'\\]|\$\{/);
  return execStart
    .split(/\s+/)
    .filter((word) => word !== '')
    .flatMap((word) => {
      const variable = /^\$([A-Za-z_][A-Za-z0-9_]*)$/.exec(word);
      if (variable === null) {
        expect(word, 'a word of ExecStart').to.not.contain('$');
        return [word];
      }
      return (env[variable[1]!] ?? '').split(/\s+/).filter((w) => w !== '');
    });
}

/** The README's command that makes the second instance's environment file, run as written. */
function readmeSecondInstanceCommand(): string {
  const readme = readFileSync(path.join(REPO, 'README.md'), 'utf8');
  const block = /\*\*One daemon per interface\*\*[\s\S]*?```sh\n([\s\S]*?)```/.exec(readme);
  expect(block, 'README: One daemon per interface, with its block').to.not.equal(null);
  const command = /^sed [\s\S]*?>\/etc\/default\/wg-peerd-wg1$/m.exec(block![1]!);
  expect(command, 'README: the sed command that makes /etc/default/wg-peerd-wg1').to.not.equal(
    null,
  );
  return command![0];
}

interface Instance {
  name: string;
  env: Record<string, string>;
  stateDir: string;
  argv: string[];
  listen: string;
  daemon?: DaemonProcess;
  publicKey?: string;
}

describe('the template unit wg-peerd@.service: wg0 and wg1 side by side (real kernel, issue 32)', function () {
  this.timeout(300_000);
  const unit = readFileSync(TEMPLATE, 'utf8');
  const lines = serviceLines(unit);
  const instances: Instance[] = [];
  const mounted: string[] = [];

  before(function () {
    assertInTestVm();
    for (const name of INSTANCES) removeDaemonLeftovers(name);
    // The host's /etc/default and /var/lib are read-only in the guest: empty ones for the test,
    // as on a fresh host with nothing of wg-peerd yet.
    for (const dir of ['/etc/default', '/var/lib']) {
      sh(`mount -t tmpfs -o mode=755 tmpfs ${dir}`);
      mounted.push(dir);
    }
  });

  after(async function () {
    for (const instance of instances) await instance.daemon?.stop();
    for (const name of INSTANCES) removeDaemonLeftovers(name);
    for (const dir of mounted.reverse()) trySh(`umount ${dir}`);
  });

  it("makes each instance's environment file as the README says, at the path the template names", function () {
    const tokens = mkdtempSync('/tmp/template-tokens-');
    chmodSync(tokens, 0o755);
    const adminFile = path.join(tokens, 'admin.tokens');
    const readFile = path.join(tokens, 'read.tokens');
    for (const file of [adminFile, readFile]) {
      writeFileSync(file, `${ADMIN_TOKEN}${file === readFile ? '-read' : ''}\n`, { mode: 0o600 });
      chownSync(file, UID, GID);
    }
    // wg0: the defaults as installed; wg1: the README's command, in the package's directory.
    const file0 = setting(lines, 'EnvironmentFile', 'wg0');
    const file1 = setting(lines, 'EnvironmentFile', 'wg1');
    expect([file0, file1]).to.deep.equal([
      '/etc/default/wg-peerd-wg0',
      '/etc/default/wg-peerd-wg1',
    ]);
    execFileSync('install', ['-m', '0644', DEFAULTS, file0]);
    execFileSync('bash', ['-e', '-c', readmeSecondInstanceCommand()], { cwd: REPO });
    for (const file of [file0, file1]) {
      // The operator's edits the README leaves to them: the address clients dial (this VM's
      // underlay), and token files where this guest can write them (/etc is read-only here).
      const text = readFileSync(file, 'utf8')
        .replace(/^#WG_PEERD_ENDPOINT_HOST=.*$/m, `WG_PEERD_ENDPOINT_HOST=${SERVER_UNDERLAY_IP}`)
        .replaceAll('/etc/wg-peerd/admin.tokens', adminFile)
        .replaceAll('/etc/wg-peerd/read.tokens', readFile);
      writeFileSync(file, text);
    }
    for (const name of INSTANCES) {
      const env: Record<string, string> = {};
      for (const [key, value] of lines) {
        if (key !== 'Environment') continue;
        const assignment = expand(value, name);
        env[assignment.slice(0, assignment.indexOf('='))] = assignment.slice(
          assignment.indexOf('=') + 1,
        );
      }
      Object.assign(env, readEnvironmentFile(setting(lines, 'EnvironmentFile', name)));
      const stateDir = path.join('/var/lib', setting(lines, 'StateDirectory', name));
      instances.push({
        name,
        env,
        stateDir,
        argv: commandLine(setting(lines, 'ExecStart', name), env),
        listen: env.WG_PEERD_LISTEN!,
      });
    }
    // What the README says two instances must differ in, they do.
    const [a, b] = instances;
    expect(a!.env.WG_PEERD_LISTEN).to.equal('127.0.0.1:8080');
    expect(b!.env.WG_PEERD_LISTEN).to.equal('127.0.0.1:8081');
    expect(b!.env.WG_PEERD_LISTEN_PORT).to.equal('51821');
    expect(b!.env.WG_PEERD_ADDRESS).to.equal('10.9.0.1/24');
    expect(a!.env.WG_PEERD_STATE_DIR).to.equal('/var/lib/wg-peerd-wg0');
    expect(b!.env.WG_PEERD_STATE_DIR).to.equal('/var/lib/wg-peerd-wg1');
    expect(b!.argv.slice(0, 3)).to.deep.equal(['wg-peerd', '--interface', 'wg1']);
    expect(b!.argv).to.include.members(['--token-file', adminFile]);
  });

  it("starts both, each from its ExecStart as written, as the unit's user with CAP_NET_ADMIN only", async function () {
    expect(instances).to.have.lengthOf(2);
    const mode = Number.parseInt(lines.find(([k]) => k === 'StateDirectoryMode')![1], 8);
    const caps = lines.find(([k]) => k === 'AmbientCapabilities')![1];
    expect(caps).to.equal('CAP_NET_ADMIN');
    expect(lines.find(([k]) => k === 'CapabilityBoundingSet')![1]).to.equal('CAP_NET_ADMIN');
    for (const instance of instances) {
      // StateDirectory=: systemd makes it, owned by User= and Group=, with StateDirectoryMode=.
      mkdirSync(instance.stateDir, { mode });
      chmodSync(instance.stateDir, mode);
      chownSync(instance.stateDir, UID, GID);
      const [program, ...args] = instance.argv;
      // `wg-peerd` is the command npm installs: this build's dist/src/main.js (startDaemon's
      // `node dist/src/main.js` after the prefix); the environment is only what systemd passes.
      expect(program).to.equal('wg-peerd');
      const environment = Object.entries({ PATH: SERVICE_PATH, ...instance.env }).map(
        ([key, value]) => `${key}=${value}`,
      );
      instance.daemon = await startDaemon({
        prefix: [
          'env',
          '-i',
          ...environment,
          'setpriv',
          `--reuid=${UID}`,
          `--regid=${GID}`,
          '--clear-groups',
          '--inh-caps=-all,+net_admin',
          '--ambient-caps=-all,+net_admin',
          '--bounding-set=-all,+net_admin',
          '--no-new-privs',
        ],
        args,
        listen: instance.listen,
        token: ADMIN_TOKEN,
      });
    }
    // As the unit's User= (its stand-in) with AmbientCapabilities= and CapabilityBoundingSet=.
    for (const instance of instances) {
      const status = readFileSync(`/proc/${instance.daemon!.child.pid!}/status`, 'utf8');
      expect(status, instance.name).to.match(new RegExp(`^Uid:\\s+${UID}\\s+${UID}\\s`, 'm'));
      expect(status, instance.name).to.match(new RegExp(`^CapEff:\\s+${CAP_NET_ADMIN_MASK}$`, 'm'));
      expect(status, instance.name).to.match(new RegExp(`^CapBnd:\\s+${CAP_NET_ADMIN_MASK}$`, 'm'));
    }
    // Both run at once: each its own interface, WireGuard port and address.
    expect(wgShowDump('wg0').device.listenPort).to.equal(51820);
    expect(wgShowDump('wg1').device.listenPort).to.equal(51821);
    expect(sh('ip -4 -o addr show dev wg0')).to.contain('10.8.0.1/24');
    expect(sh('ip -4 -o addr show dev wg1')).to.contain('10.9.0.1/24');
    expect(wgShowDump('wg0').device.publicKey).to.not.equal(wgShowDump('wg1').device.publicKey);
  });

  it('creates a peer through each API on its own interface, and each lists only its own', async function () {
    for (const [instance, ip] of [
      [instances[0]!, '10.8.0.2'],
      [instances[1]!, '10.9.0.2'],
    ] as const) {
      const created = await api(instance.daemon!, 'POST', '/api/peer', undefined, ADMIN_TOKEN);
      expect(created.status, JSON.stringify(created.body)).to.equal(201);
      const peer = created.body.peer as { ip: string; publicKey: string };
      expect(peer.ip).to.equal(ip);
      const server = created.body.server as { endpoint: string };
      expect(server.endpoint).to.equal(
        `${SERVER_UNDERLAY_IP}:${instance.name === 'wg0' ? 51820 : 51821}`,
      );
      instance.publicKey = peer.publicKey;
    }
    for (const [mine, other] of [
      [instances[0]!, instances[1]!],
      [instances[1]!, instances[0]!],
    ] as const) {
      const inKernel = wgShowDump(mine.name).peers.map((p) => p.publicKey);
      expect(inKernel, mine.name).to.deep.equal([mine.publicKey]);
      const list = await api(mine.daemon!, 'GET', '/api/peers', undefined, ADMIN_TOKEN);
      const listed = (list.body.peers as Array<{ public_key: string }>).map((p) => p.public_key);
      expect(listed, `GET /api/peers of ${mine.name}`).to.deep.equal([mine.publicKey]);
      expect(listed).to.not.include(other.publicKey);
    }
  });

  it("keeps each state in its own StateDirectory, owned by the unit's user, mode 0700", function () {
    for (const instance of instances) {
      const dir = statSync(instance.stateDir);
      expect(dir.uid, instance.stateDir).to.equal(UID);
      expect(dir.mode & 0o777).to.equal(0o700);
      const journal = readFileSync(path.join(instance.stateDir, instance.name, 'journal'), 'utf8');
      expect(journal, `${instance.name}'s journal`).to.contain(instance.publicKey!);
      const other = instances.find((i) => i !== instance)!;
      expect(journal).to.not.contain(other.publicKey!);
    }
  });

  it('stops each on SIGTERM with status 0', async function () {
    for (const instance of instances) {
      expect(await instance.daemon!.stop(), instance.name).to.equal(0);
      instance.daemon = undefined;
    }
  });
});
