import { expect } from 'chai';
import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs';
import path from 'node:path';

// DESIGN §2: imports run one way, downwards: http → peers → state/events → kernel → netlink →
// native. On top of that: http never imports kernel or netlink (the meaning of an errno is
// decided in src/kernel, so peers never imports netlink either); state has no kernel (it keeps
// what the domain gives it); peers hands its changes to a sink it is given (it imports no
// events); netlink knows no family.
const SRC = path.resolve(__dirname, '..', '..', '..', '..', 'src');

function sourceFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const file = path.join(dir, name);
    return statSync(file).isDirectory() ? sourceFiles(file) : [file];
  });
}

/** Every module specifier of an import/export ... from, or a require/import() call. */
function importsOf(file: string): string[] {
  const text = readFileSync(file, 'utf8');
  const found: string[] = [];
  const pattern =
    /(?:\bfrom\s*|\brequire\s*\(\s*|\bimport\s*\(\s*|^\s*import\s+)['"]([^'"]+)['"]/gm;
  for (let match = pattern.exec(text); match; match = pattern.exec(text)) found.push(match[1]);
  return found;
}

/** The top-level directory under src/ an import from `file` resolves into, or null. */
function layerOf(file: string, specifier: string): string | null {
  if (!specifier.startsWith('.')) return null;
  const target = path.relative(SRC, path.resolve(path.dirname(file), specifier));
  return target.split(path.sep)[0] ?? null;
}

function offenders(layer: string, forbidden: string[]): string[] {
  return sourceFiles(path.join(SRC, layer)).flatMap((file) =>
    importsOf(file)
      .filter((specifier) => forbidden.includes(layerOf(file, specifier) ?? ''))
      .map((specifier) => `${path.relative(SRC, file)} imports ${specifier}`),
  );
}

/** The layers from the top down; the layers of one level are rooms that import each other not. */
const LEVELS: readonly (readonly string[])[] = [
  ['http'],
  ['peers'],
  ['state', 'events'],
  ['kernel'],
  ['netlink'],
  ['native'],
];

/** What a layer may not import although it lies below it (DESIGN §2, the list above). */
const SKIPS: Readonly<Record<string, readonly string[]>> = {
  http: ['kernel', 'netlink', 'native'],
  peers: ['events', 'netlink', 'native'],
  state: ['kernel', 'netlink', 'native'],
  events: ['kernel', 'netlink', 'native'],
};

/**
 * Imports that run against the levels, each with its reason. The events room reads the
 * domain's snapshot and change types and its status helpers (issue 20), while peers only
 * hands changes to a sink it is given, so this edge runs up from events to peers.
 */
const ALLOWED_UPWARDS: ReadonlyArray<readonly [string, string]> = [['events', 'peers']];

/** Every layer a file of `layer` must not import: those above, its level's rooms, SKIPS. */
function forbiddenFor(layer: string): string[] {
  const level = LEVELS.findIndex((names) => names.includes(layer));
  const above = LEVELS.slice(0, level).flat();
  const rooms = LEVELS[level]!.filter((name) => name !== layer);
  return [...above, ...rooms, ...(SKIPS[layer] ?? [])].filter(
    (target) => !ALLOWED_UPWARDS.some(([from, to]) => from === layer && to === target),
  );
}

/** Identifiers of a family's own constants (WireGuard, nf_tables, rtnetlink, tc). */
const FAMILY_CONSTANT =
  /\b(?:export\s+)?(?:const|enum|function|let)\s+(WG_\w+|WGDEVICE_\w+|WGPEER_\w+|WGALLOWEDIP_\w+|NFTA?_\w+|NFNL\w*|TCA_\w+|TC_\w+|RTM_\w+|IFLA_\w+|IFA_\w+|RTA_\w+)/g;
/** A generic-netlink family named in code (not in a comment). */
const FAMILY_NAME = /['"`](?:wireguard|nftables|nf_tables)['"`]/;

function withoutComments(text: string): string {
  return text.replace(/\/\*[\s\S]*?\*\//g, '').replace(/\/\/.*$/gm, '');
}

describe('src/ layers', () => {
  it('finds imports the way the check reads them', () => {
    const calls = path.join(SRC, 'peers', 'kernel-calls.ts');
    expect(importsOf(calls).map((s) => layerOf(calls, s))).to.include('kernel');
  });

  it("forbids, for each layer, every layer above it, its level's other room and its skips", () => {
    // The rules as a table: one place to read them, and this test holds the table to DESIGN §2.
    expect(forbiddenFor('http')).to.have.members(['kernel', 'netlink', 'native']);
    expect(forbiddenFor('peers')).to.have.members(['http', 'events', 'netlink', 'native']);
    expect(forbiddenFor('state')).to.have.members([
      'http',
      'peers',
      'events',
      'kernel',
      'netlink',
      'native',
    ]);
    expect(forbiddenFor('events')).to.have.members([
      'http',
      'state',
      'kernel',
      'netlink',
      'native',
    ]);
    expect(forbiddenFor('kernel')).to.have.members(['http', 'peers', 'state', 'events']);
    expect(forbiddenFor('netlink')).to.have.members(['http', 'peers', 'state', 'events', 'kernel']);
  });

  for (const layer of LEVELS.flat().filter((name) => name !== 'native')) {
    it(`src/${layer} imports nothing from ${forbiddenFor(layer).join(', ')}`, function () {
      // A layer not built yet (src/state before its branch lands) has nothing to check.
      if (!existsSync(path.join(SRC, layer))) this.skip();
      expect(offenders(layer, forbiddenFor(layer))).to.deep.equal([]);
    });
  }

  it('nothing imports the wiring: no room imports src/daemon or src/main.ts, src/daemon not main.ts', () => {
    // src/main.ts (the process) and src/daemon (startDaemon's phases, issue 32) sit above every
    // layer and may import each; an import back would tie a layer to the whole daemon.
    const rooms = readdirSync(SRC).filter(
      (name) => name !== 'daemon' && statSync(path.join(SRC, name)).isDirectory(),
    );
    expect([
      ...rooms.flatMap((room) => offenders(room, ['daemon', 'main'])),
      ...offenders('daemon', ['main']),
    ]).to.deep.equal([]);
    // Checks the check: main.ts's own import of src/daemon is read as one.
    expect(
      importsOf(path.join(SRC, 'main.ts')).map((s) => layerOf(path.join(SRC, 'main.ts'), s)),
    ).to.include('daemon');
  });

  it("src/netlink knows no family: no family's constants, no family named in code", () => {
    const found: string[] = [];
    for (const file of sourceFiles(path.join(SRC, 'netlink'))) {
      const code = withoutComments(readFileSync(file, 'utf8'));
      for (const match of code.matchAll(FAMILY_CONSTANT)) {
        found.push(`${path.relative(SRC, file)} declares ${match[1]}`);
      }
      if (FAMILY_NAME.test(code)) found.push(`${path.relative(SRC, file)} names a family`);
    }
    expect(found).to.deep.equal([]);
  });

  it('catches what it forbids (a kernel module naming a family is found, in the kernel)', () => {
    const wireguard = path.join(SRC, 'kernel', 'wireguard', 'schema.ts');
    const code = withoutComments(readFileSync(wireguard, 'utf8'));
    expect(FAMILY_NAME.test(code) || [...code.matchAll(FAMILY_CONSTANT)].length > 0).to.equal(true);
    expect(offenders('kernel', ['netlink'])).to.not.deep.equal([]);
  });
});
