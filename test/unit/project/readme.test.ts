import { expect } from 'chai';
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { ROUTES, errorsOf } from '../../../src/http/routes';

const ROOT = path.resolve(__dirname, '../../../..');
const read = (file: string) => readFileSync(path.join(ROOT, file), 'utf8');
const README = read('README.md');

/** The text of the README's `## title` section, up to the next `## `. */
function section(title: string): string {
  const start = README.indexOf(`\n## ${title}\n`);
  expect(start, `README has a section "## ${title}"`).to.be.greaterThan(-1);
  const end = README.indexOf('\n## ', start + 4);
  return README.slice(start, end === -1 ? undefined : end);
}

/** The documents of the repository an operator or developer reads. */
function documents(): string[] {
  const docs = readdirSync(path.join(ROOT, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .map((f) => path.join('docs', f));
  return ['README.md', 'DEVELOPERS.md', 'CHANGELOG.md', ...docs];
}

// Issue 21: the README is an operator's guide whose promises are true.
describe('README.md, the operator guide', function () {
  this.timeout(20_000);

  it('has the sections an operator reads, in the order they need them', () => {
    const order = [
      'Prerequisites',
      'Install',
      'Host set-up for a working VPN',
      'First start',
      'Production start',
      'The API',
      'Configuration',
      'Monitoring',
      'Security model',
      'Troubleshooting',
    ];
    const found = [...README.matchAll(/^## (.+)$/gm)].map((m) => m[1]!);
    expect(found.filter((title) => order.includes(title))).to.deep.equal(order);
  });

  it('keeps on its first screen the command that starts the service and the one that tests it', () => {
    const firstScreen = README.split('\n').slice(0, 25).join('\n');
    expect(firstScreen).to.contain('npm ci && npm start');
    expect(firstScreen).to.contain('npm test && npm run test:kernel');
  });

  it('installs the version package.json has', () => {
    const { version } = JSON.parse(read('package.json')) as { version: string };
    expect(section('Install')).to.contain(`npm install -g ./wg-peerd-${version}.tgz`);
  });

  it('cites no file outside the repository, and every file it links exists', () => {
    for (const file of documents()) {
      const text = read(file);
      expect(text, file).to.not.match(/\b(DESIGN|SPEC)(\.md| §)/);
      for (const [, target] of text.matchAll(/\]\(([^)#\s]+)(#[^)]*)?\)/g)) {
        if (/^[a-z]+:/.test(target!)) continue; // https: and the like
        const resolved = path.join(ROOT, path.dirname(file), target!);
        expect(existsSync(resolved), `${file} links ${target}`).to.equal(true);
      }
    }
  });

  it('lists every route of the route table in The API, with its method', () => {
    const api = section('The API');
    for (const def of ROUTES) {
      const shown = def.openapiPath.replace('{publicKey}', '<publicKey>');
      expect(api, def.id).to.contain(`\`${def.method.toUpperCase()} ${shown}`);
    }
  });

  it('names every error code a route can answer in The API', () => {
    const api = section('The API');
    const codes = new Set<string>();
    for (const def of ROUTES)
      for (const list of errorsOf(def).values()) list.forEach((c) => codes.add(c));
    // Answered before any route: the server's refusals and the fallbacks of app.ts.
    for (const code of [
      'ROUTE_NOT_FOUND',
      'METHOD_NOT_ALLOWED',
      'REQUEST_TIMEOUT',
      'HEADERS_TOO_LARGE',
    ]) {
      codes.add(code);
    }
    expect([...codes].filter((code) => !api.includes(`\`${code}\``))).to.deep.equal([]);
  });

  it('lists every option of wg-peerd --help, with its variable, in Configuration', () => {
    const configuration = section('Configuration');
    const help = spawnSync(
      process.execPath,
      [path.join(ROOT, 'dist', 'src', 'main.js'), '--help'],
      {
        encoding: 'utf8',
      },
    ).stdout;
    const flags = [...help.matchAll(/^ {2}(--[a-z-]+)/gm)].map((m) => m[1]!);
    const variables = [...help.matchAll(/env: (WG_PEERD_[A-Z_]+)/g)].map((m) => m[1]!);
    expect(flags.length).to.be.greaterThan(15);
    for (const name of [
      ...flags.filter((f) => f !== '--help' && f !== '--version'),
      ...variables,
    ]) {
      expect(configuration, name).to.contain(name);
    }
  });

  it('marks the blocks the walkthrough runs in the VM, each right above a shell block', () => {
    const lines = README.split('\n');
    const kinds: string[] = [];
    lines.forEach((line, i) => {
      const marker = /^<!-- walkthrough: *([a-z]+)(?:, *check: *([a-z]+))? *-->$/.exec(line);
      if (marker === null) {
        expect(line, `line ${i + 1}`).to.not.contain('walkthrough:');
        return;
      }
      expect(['install', 'server', 'daemon', 'client']).to.include(marker[1]);
      if (marker[2] !== undefined) expect(['created', 'alive', 'deleted']).to.include(marker[2]);
      expect(lines[i + 1], `line ${i + 2}`).to.equal('```sh');
      kinds.push(marker[1]!);
    });
    // From install to a client passing traffic (issue 21, done-when 4).
    expect(kinds[0]).to.equal('install');
    expect(kinds).to.include.members(['server', 'daemon', 'client']);
  });
});
