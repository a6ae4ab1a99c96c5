import { expect } from 'chai';
import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs';
import path from 'node:path';
import ts from 'typescript';

// Issue 28, Done when 3: no function in src/peers or src/kernel over 80 lines, and src/peers
// has no import circle. A function is read by the TypeScript compiler, not by a pattern: a
// declaration, a method, an arrow function, a function expression, a constructor or an
// accessor, from the first line of its node to the last, both included (the signature and
// the closing brace count). A nested function is a function of its own and also counts
// within its parent. An import circle is a strongly connected component of the graph whose
// edges are the relative imports of a room's files, `import type` and `export … from` included:
// a type-only import still ties two files together for whoever reads or moves one of them
// (the issue's own example, checkpoint.ts ↔ service.ts, is an `import type`).
const SRC = path.resolve(__dirname, '..', '..', '..', '..', 'src');

/** The most lines one function may span (issue 28, Done when 3). */
const MAX_LINES = 80;

/** The rooms whose functions are held to MAX_LINES (issue 28 names these two). */
const MEASURED_ROOMS = ['peers', 'kernel'] as const;

/**
 * Issue 32: startDaemon (src/main.ts, 358 lines) becomes a sequence of named phases, each a
 * function under 60 lines. The process (src/main.ts) and the daemon's phases (src/daemon) are
 * held to that, every function of theirs, not only the phases.
 */
const PHASE_MAX_LINES = 60;
const PHASE_FILES = ['main.ts'] as const;
const PHASE_ROOMS = ['daemon'] as const;

/**
 * TEMPORARY, removed by the lead at integration with the other branch of issue 28: the files of
 * src/peers that branch rewrites at the same time (this branch leaves them alone). Only these
 * files may hold the known exceptions below.
 */
const FILES_BEING_REWRITTEN: readonly string[] = [];

/**
 * TEMPORARY, removed by the lead at integration: the functions over MAX_LINES in
 * FILES_BEING_REWRITTEN, each as its file under src/ and its name as a failure names it. Any
 * other long function fails the test; an entry that no longer matches a long function fails it
 * too, so the list only shrinks.
 */
const KNOWN_LONG_IN_FILES_BEING_REWRITTEN: ReadonlyArray<readonly [string, string]> = [];

/**
 * TEMPORARY, removed by the lead at integration: the import circles of src/peers made only of
 * FILES_BEING_REWRITTEN, each as its files under src/, sorted, joined by ' ↔ '. The same rule:
 * any other circle fails, and so does an entry no longer found.
 */
const KNOWN_CIRCLES_IN_FILES_BEING_REWRITTEN: readonly string[] = [];

function sourceFiles(dir: string): string[] {
  return readdirSync(dir)
    .flatMap((name) => {
      const file = path.join(dir, name);
      return statSync(file).isDirectory() ? sourceFiles(file) : [file];
    })
    .filter((file) => file.endsWith('.ts'))
    .sort();
}

const parsed = new Map<string, ts.SourceFile>();

/** The file as the compiler reads it (each file parsed once for all the tests). */
function parse(file: string): ts.SourceFile {
  let source = parsed.get(file);
  if (source === undefined) {
    source = ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.ES2022, true);
    parsed.set(file, source);
  }
  return source;
}

type FunctionNode =
  | ts.FunctionDeclaration
  | ts.MethodDeclaration
  | ts.ArrowFunction
  | ts.FunctionExpression
  | ts.ConstructorDeclaration
  | ts.GetAccessorDeclaration
  | ts.SetAccessorDeclaration;

function isFunction(node: ts.Node): node is FunctionNode {
  return (
    ts.isFunctionDeclaration(node) ||
    ts.isMethodDeclaration(node) ||
    ts.isArrowFunction(node) ||
    ts.isFunctionExpression(node) ||
    ts.isConstructorDeclaration(node) ||
    ts.isGetAccessorDeclaration(node) ||
    ts.isSetAccessorDeclaration(node)
  );
}

function nameText(name: ts.Node | undefined, file: ts.SourceFile): string | null {
  return name === undefined ? null : name.getText(file);
}

/** How a function is named in a report: its own name, else the binding it is assigned to. */
function functionName(node: FunctionNode, file: ts.SourceFile): string {
  if (ts.isConstructorDeclaration(node)) return 'constructor';
  const own = nameText(node.name, file);
  if (own !== null) return ts.isGetAccessorDeclaration(node) ? `get ${own}` : own;
  const parent = node.parent;
  if (ts.isVariableDeclaration(parent) || ts.isPropertyAssignment(parent)) {
    return nameText(parent.name, file) ?? '(anonymous)';
  }
  if (ts.isPropertyDeclaration(parent)) return nameText(parent.name, file) ?? '(anonymous)';
  return '(anonymous)';
}

interface Measured {
  /** The file under src/, with forward slashes. */
  readonly file: string;
  readonly line: number;
  readonly name: string;
  readonly lines: number;
}

/** Every function of one parsed file with its first line and its span in lines. */
function functionsOf(source: ts.SourceFile): Measured[] {
  const file = path.relative(SRC, source.fileName).split(path.sep).join('/');
  const found: Measured[] = [];
  const visit = (node: ts.Node): void => {
    if (isFunction(node)) {
      const start = source.getLineAndCharacterOfPosition(node.getStart(source)).line + 1;
      const end = source.getLineAndCharacterOfPosition(node.getEnd()).line + 1;
      found.push({ file, line: start, name: functionName(node, source), lines: end - start + 1 });
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return found;
}

/** Every function of the room's files that spans more than MAX_LINES lines. */
function longFunctionsIn(room: string): Measured[] {
  return sourceFiles(path.join(SRC, room))
    .flatMap((file) => functionsOf(parse(file)))
    .filter((one) => one.lines > MAX_LINES);
}

/** Every function of the process and of the daemon's phases over PHASE_MAX_LINES lines. */
function longPhaseFunctions(): Measured[] {
  return [
    ...PHASE_FILES.map((file) => path.join(SRC, file)),
    ...PHASE_ROOMS.flatMap((room) => sourceFiles(path.join(SRC, room))),
  ]
    .flatMap((file) => functionsOf(parse(file)))
    .filter((one) => one.lines > PHASE_MAX_LINES);
}

function report(found: Measured): string {
  return `src/${found.file}:${found.line} ${found.name} (${found.lines} lines)`;
}

function isKnownLong(found: Measured): boolean {
  return KNOWN_LONG_IN_FILES_BEING_REWRITTEN.some(
    ([file, name]) => file === found.file && name === found.name,
  );
}

/** Every module specifier the file imports or re-exports, `import type` and import() included. */
function importsOf(source: ts.SourceFile): string[] {
  const found: string[] = [];
  const visit = (node: ts.Node): void => {
    if (
      (ts.isImportDeclaration(node) || ts.isExportDeclaration(node)) &&
      node.moduleSpecifier !== undefined &&
      ts.isStringLiteral(node.moduleSpecifier)
    ) {
      found.push(node.moduleSpecifier.text);
    } else if (
      ts.isCallExpression(node) &&
      node.expression.kind === ts.SyntaxKind.ImportKeyword &&
      node.arguments[0] !== undefined &&
      ts.isStringLiteral(node.arguments[0])
    ) {
      found.push(node.arguments[0].text);
    } else if (
      ts.isImportTypeNode(node) &&
      ts.isLiteralTypeNode(node.argument) &&
      ts.isStringLiteral(node.argument.literal)
    ) {
      found.push(node.argument.literal.text);
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return found;
}

/** The .ts file a relative specifier of `from` names (`./x` → x.ts or x/index.ts), or null. */
function resolve(from: string, specifier: string): string | null {
  if (!specifier.startsWith('.')) return null;
  const base = path.resolve(path.dirname(from), specifier.replace(/\.js$/, ''));
  return [`${base}.ts`, path.join(base, 'index.ts')].find((file) => existsSync(file)) ?? null;
}

/** The import graph of the files under `dir`: each file → the files under `dir` it imports. */
function importGraph(dir: string): Map<string, string[]> {
  const files = sourceFiles(dir);
  const inside = new Set(files);
  return new Map(
    files.map((file) => [
      file,
      importsOf(parse(file))
        .map((specifier) => resolve(file, specifier))
        .filter((target): target is string => target !== null && inside.has(target)),
    ]),
  );
}

/**
 * The strongly connected components of more than one file, or of one file importing itself
 * (Tarjan, "Depth-first search and linear graph algorithms", SIAM J. Comput. 1(2), 1972).
 */
function circles(graph: ReadonlyMap<string, readonly string[]>): string[][] {
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[][] = [];
  const connect = (file: string): void => {
    index.set(file, index.size);
    low.set(file, index.get(file)!);
    stack.push(file);
    onStack.add(file);
    for (const target of graph.get(file) ?? []) {
      if (!index.has(target)) {
        connect(target);
        low.set(file, Math.min(low.get(file)!, low.get(target)!));
      } else if (onStack.has(target)) {
        low.set(file, Math.min(low.get(file)!, index.get(target)!));
      }
    }
    if (low.get(file) !== index.get(file)) return;
    const component: string[] = [];
    for (let top = stack.pop()!; ; top = stack.pop()!) {
      onStack.delete(top);
      component.push(top);
      if (top === file) break;
    }
    if (component.length > 1 || (graph.get(file) ?? []).includes(file)) found.push(component);
  };
  for (const file of graph.keys()) if (!index.has(file)) connect(file);
  return found;
}

function circleName(component: readonly string[]): string {
  return component
    .map((file) => path.relative(SRC, file).split(path.sep).join('/'))
    .sort()
    .join(' ↔ ');
}

/** The rooms of src/: its directories. */
function rooms(): string[] {
  return readdirSync(SRC)
    .filter((name) => statSync(path.join(SRC, name)).isDirectory())
    .sort();
}

/** A source held in memory, named as if it stood in src/ (for the tests of the check). */
function inMemory(text: string): ts.SourceFile {
  return ts.createSourceFile(path.join(SRC, 'example.ts'), text, ts.ScriptTarget.ES2022, true);
}

describe('src/ function length and import circles (issue 28)', () => {
  for (const room of MEASURED_ROOMS) {
    it(`no function in src/${room} spans more than ${MAX_LINES} lines, first line to last`, () => {
      expect(
        longFunctionsIn(room)
          .filter((one) => !isKnownLong(one))
          .map(report),
      ).to.deep.equal([]);
    });
  }

  it(`no function in src/main.ts or src/daemon spans more than ${PHASE_MAX_LINES} lines (issue 32)`, () => {
    expect(longPhaseFunctions().map(report)).to.deep.equal([]);
  });

  it('measures the phases where they are: src/daemon holds startDaemon and its phases', () => {
    // A rename or move of the phases must not leave the rule above measuring nothing.
    const names = sourceFiles(path.join(SRC, 'daemon'))
      .flatMap((file) => functionsOf(parse(file)))
      .map((one) => one.name);
    expect(names).to.include.members([
      'startDaemon',
      'configurationPhase',
      'statePhase',
      'interfacePhase',
      'restorePhase',
      'servicesPhase',
      'httpPhase',
      'servePhase',
      'reloadPath',
    ]);
  });

  it('lists as a known exception only a long function that is still there', () => {
    const found = MEASURED_ROOMS.flatMap(longFunctionsIn);
    const stale = KNOWN_LONG_IN_FILES_BEING_REWRITTEN.filter(
      ([file, name]) => !found.some((one) => one.file === file && one.name === name),
    );
    expect(stale).to.deep.equal([]);
  });

  it('excuses, for now, only functions and circles in the files another branch rewrites', () => {
    const outside = [
      ...KNOWN_LONG_IN_FILES_BEING_REWRITTEN.map(([file]) => file),
      ...KNOWN_CIRCLES_IN_FILES_BEING_REWRITTEN.flatMap((name) => name.split(' ↔ ')),
    ].filter((file) => !FILES_BEING_REWRITTEN.includes(file));
    expect(outside).to.deep.equal([]);
  });

  it('measures every kind of function, from its signature to its closing brace', () => {
    const source = inMemory(
      [
        'function declared() {',
        '  return 1;',
        '}',
        'class C {',
        '  constructor() {}',
        '  method() {',
        '  }',
        '  get value() {',
        '    return 1;',
        '  }',
        '  set value(v) {',
        '  }',
        '  field = () =>',
        '    1;',
        '}',
        'const arrow = () => {',
        '  return 1;',
        '};',
        'const expression = function () {',
        '  return 1;',
        '};',
        'run(() => {',
        '});',
      ].join('\n'),
    );
    expect(functionsOf(source).map((one) => `${one.name}:${one.line}+${one.lines}`)).to.deep.equal([
      'declared:1+3',
      'constructor:5+1',
      'method:6+2',
      'get value:8+3',
      'value:11+2',
      'field:13+2',
      'arrow:16+3',
      'expression:19+3',
      '(anonymous):22+2',
    ]);
  });

  it('reads type-only imports, re-exports and import() as edges', () => {
    const source = inMemory(
      [
        "import type { A } from './a';",
        "import { type B } from './b';",
        "export { C } from './c';",
        "export type { D } from './d';",
        "type E = import('./e').E;",
        "const f = () => import('./f');",
        "import 'node:fs';",
      ].join('\n'),
    );
    expect(importsOf(source)).to.deep.equal(['./a', './b', './c', './d', './e', './f', 'node:fs']);
  });

  it('finds a circle and nothing that only leads into one (checks the check)', () => {
    const graph = new Map([
      ['a', ['b']],
      ['b', ['c']],
      ['c', ['a']],
      ['d', ['a']],
      ['e', ['e']],
      ['f', []],
    ]);
    expect(circles(graph).map((component) => [...component].sort())).to.deep.equal([
      ['a', 'b', 'c'],
      ['e'],
    ]);
  });

  it('src/peers has no import circle (type-only imports count)', () => {
    const found = circles(importGraph(path.join(SRC, 'peers'))).map(circleName);
    expect(
      found.filter((name) => !KNOWN_CIRCLES_IN_FILES_BEING_REWRITTEN.includes(name)),
    ).to.deep.equal([]);
  });

  it('lists as a known circle only one that is still there', () => {
    const found = circles(importGraph(path.join(SRC, 'peers'))).map(circleName);
    const stale = KNOWN_CIRCLES_IN_FILES_BEING_REWRITTEN.filter((name) => !found.includes(name));
    expect(stale).to.deep.equal([]);
  });

  for (const room of rooms().filter((name) => name !== 'peers')) {
    it(`src/${room} has no import circle (type-only imports count)`, () => {
      expect(circles(importGraph(path.join(SRC, room))).map(circleName)).to.deep.equal([]);
    });
  }
});
