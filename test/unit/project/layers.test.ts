import { expect } from 'chai';
import { readFileSync, readdirSync, statSync } from 'node:fs';
import path from 'node:path';

// Imports run one way: http → peers → kernel → netlink. The meaning of an errno is decided in
// src/kernel, so src/peers and src/http never import src/netlink (nor http the kernel).
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

describe('src/ layers', () => {
  it('finds imports the way the check reads them', () => {
    const service = path.join(SRC, 'peers', 'service.ts');
    expect(importsOf(service).map((s) => layerOf(service, s))).to.include('kernel');
  });

  it('src/peers imports nothing from src/netlink or src/http', () => {
    expect(offenders('peers', ['netlink', 'http'])).to.deep.equal([]);
  });

  it('src/events is a room of its own: it imports the domain, never http, kernel or netlink', () => {
    expect(offenders('events', ['http', 'kernel', 'netlink'])).to.deep.equal([]);
  });

  it('src/peers imports nothing from src/events (it hands changes to a sink it is given)', () => {
    expect(offenders('peers', ['events'])).to.deep.equal([]);
  });

  it('src/http imports nothing from src/kernel or src/netlink', () => {
    expect(offenders('http', ['kernel', 'netlink'])).to.deep.equal([]);
  });
});
