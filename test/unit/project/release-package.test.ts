import { expect } from 'chai';
import { spawnSync } from 'node:child_process';
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { builtinModules } from 'node:module';
import path from 'node:path';

const ROOT = path.resolve(__dirname, '../../../..');

interface Manifest {
  version: string;
  bin: Record<string, string>;
  scripts: Record<string, string>;
  dependencies: Record<string, string>;
  devDependencies: Record<string, string>;
}

const manifest = (): Manifest =>
  JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as Manifest;

/** The files `npm pack` puts in the release tarball (without running the pack scripts). */
function packedFiles(): string[] {
  const result = spawnSync('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], {
    cwd: ROOT,
    encoding: 'utf8',
    timeout: 60_000,
  });
  expect(result.status, result.stderr).to.equal(0);
  const [pack] = JSON.parse(result.stdout) as [{ files: { path: string }[] }];
  return pack.files.map((f) => f.path);
}

function walk(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) =>
    entry.isDirectory() ? walk(path.join(dir, entry.name)) : [path.join(dir, entry.name)],
  );
}

// Issue 21: a release installs with `npm install -g ./wg-peerd-<version>.tgz`, without a compiler
// and without dev dependencies (.ci/run's release step installs the real tarball in a Debian
// root without a compiler; these are the static half).
describe('the release package (npm pack)', function () {
  this.timeout(60_000);

  it('carries the built daemon, the addon sources, the unit, LICENSE and CHANGELOG, and no tests', () => {
    const files = packedFiles();
    for (const file of [
      'dist/src/main.js',
      'dist/src/netlink/native.js',
      'native/netlink.c',
      'binding.gyp',
      'scripts/build-native.sh',
      'contrib/systemd/wg-peerd.service',
      'contrib/systemd/wg-peerd.default',
      'LICENSE',
      'CHANGELOG.md',
      'README.md',
    ]) {
      expect(files, file).to.include(file);
    }
    expect(
      files.filter((f) => !/^(dist\/src|native|contrib|scripts|prebuilds)\//.test(f)),
    ).to.have.members(['CHANGELOG.md', 'LICENSE', 'README.md', 'binding.gyp', 'package.json']);
    expect(files.filter((f) => f.endsWith('.map'))).to.deep.equal([]);
  });

  it('installs the bin from the tarball: every built file of src/ is packed', () => {
    const files = packedFiles();
    const built = walk(path.join(ROOT, 'dist', 'src'))
      .filter((f) => f.endsWith('.js'))
      .map((f) => path.relative(ROOT, f));
    expect(built.length).to.be.greaterThan(20);
    expect(built.filter((f) => !files.includes(f))).to.deep.equal([]);
    expect(manifest().bin).to.deep.equal({ 'wg-peerd': 'dist/src/main.js' });
  });

  it('needs no dev dependency at run time: every package the daemon requires is a dependency', () => {
    const { dependencies, devDependencies } = manifest();
    const required = new Set<string>();
    for (const file of walk(path.join(ROOT, 'dist', 'src')).filter((f) => f.endsWith('.js'))) {
      for (const [, specifier] of readFileSync(file, 'utf8').matchAll(/require\("([^"]+)"\)/g)) {
        if (specifier!.startsWith('.') || specifier!.startsWith('node:')) continue;
        const name = specifier!.startsWith('@')
          ? specifier!.split('/').slice(0, 2).join('/')
          : specifier!.split('/')[0]!;
        if (!builtinModules.includes(name)) required.add(name);
      }
    }
    expect([...required]).to.include('node-gyp-build');
    for (const name of required) {
      expect(dependencies, `${name} is required by dist/src`).to.have.property(name);
      expect(devDependencies, name).to.not.have.property(name);
    }
  });

  describe('install script (scripts/build-native.sh)', () => {
    let dir: string;
    beforeEach(() => {
      // An unpacked release: package.json and a prebuild, no build/ (the local build stands in
      // for the prebuild: the same addon).
      dir = mkdtempSync(path.join(tmpdir(), 'wg-peerd-install-'));
      copyFileSync(path.join(ROOT, 'package.json'), path.join(dir, 'package.json'));
      mkdirSync(path.join(dir, 'prebuilds', 'linux-x64'), { recursive: true });
    });
    afterEach(() => rmSync(dir, { recursive: true, force: true }));

    /** npm runs install scripts with the package's node_modules/.bin on PATH. */
    const install = () =>
      spawnSync('sh', [path.join(ROOT, 'scripts', 'build-native.sh')], {
        cwd: dir,
        encoding: 'utf8',
        timeout: 30_000,
        env: {
          PATH: `${path.join(ROOT, 'node_modules', '.bin')}:${path.dirname(process.execPath)}:/usr/bin:/bin`,
        },
      });

    it('compiles nothing when the prebuild loads', () => {
      const prebuild = path.join(dir, 'prebuilds', 'linux-x64', 'wg-peerd.glibc.node');
      copyFileSync(path.join(ROOT, 'build', 'Release', 'netlink.node'), prebuild);
      const result = install();
      expect(result.status, result.stderr).to.equal(0);
      expect(result.stdout).to.equal(
        'wg-peerd: using the prebuilt netlink addon of prebuilds/ (nothing to compile)\n',
      );
      expect(existsSync(path.join(dir, 'build'))).to.equal(false);
    });

    it('removes a build/ of an earlier source build when the prebuild loads (it would shadow it)', () => {
      // What `npm run install` meets where a damaged build/Release stopped the start (issue 32).
      copyFileSync(
        path.join(ROOT, 'build', 'Release', 'netlink.node'),
        path.join(dir, 'prebuilds', 'linux-x64', 'wg-peerd.glibc.node'),
      );
      mkdirSync(path.join(dir, 'build', 'Release'), { recursive: true });
      writeFileSync(path.join(dir, 'build', 'Release', 'netlink.node'), 'damaged');
      const result = install();
      expect(result.status, result.stderr).to.equal(0);
      expect(existsSync(path.join(dir, 'build'))).to.equal(false);
    });

    it('builds from source (node-gyp) when the prebuild does not load', () => {
      writeFileSync(path.join(dir, 'prebuilds', 'linux-x64', 'wg-peerd.glibc.node'), 'not ELF');
      const result = install();
      // node-gyp is not on this PATH (npm adds its own): the fallback did try it.
      expect(result.status).to.not.equal(0);
      expect(result.stderr).to.contain('node-gyp');
    });
  });

  describe('prepare (scripts/prepare.sh) without TypeScript, as `npm ci --omit=dev` runs it', () => {
    let dir: string;
    beforeEach(() => (dir = mkdtempSync(path.join(tmpdir(), 'wg-peerd-prepare-'))));
    afterEach(() => rmSync(dir, { recursive: true, force: true }));
    const prepare = () =>
      spawnSync('sh', [path.join(ROOT, 'scripts', 'prepare.sh')], { cwd: dir, encoding: 'utf8' });

    it('keeps a built dist/ and succeeds', () => {
      mkdirSync(path.join(dir, 'dist', 'src'), { recursive: true });
      writeFileSync(path.join(dir, 'dist', 'src', 'main.js'), '');
      const result = prepare();
      expect(result.status).to.equal(0);
      expect(result.stdout).to.contain('keeping the built dist/');
    });

    it('stops without dist/, with one line saying to run `npm ci` (issue 32)', () => {
      // It used to succeed here, and `npm start` then died with MODULE_NOT_FOUND.
      const result = prepare();
      expect(result.status).to.equal(1);
      expect(result.stdout).to.equal('');
      const lines = result.stderr.split('\n').filter((line) => line !== '');
      expect(lines).to.have.length(1);
      expect(lines[0]).to.match(/^wg-peerd: dist\/ is not built .*: run `npm ci`/);
    });
  });

  it('has a CHANGELOG section for the version in package.json', () => {
    const changelog = readFileSync(path.join(ROOT, 'CHANGELOG.md'), 'utf8');
    expect(changelog).to.contain(`## [${manifest().version}]`);
  });
});
