import { expect } from 'chai';
import { readFileSync, readdirSync, statSync } from 'node:fs';
import path from 'node:path';

// The daemon does its work over netlink only: no wg, ip, tc or nft processes, and no way to
// start one. Source files are read from the checkout (dist/ mirrors src/ one level down).
const SRC = path.resolve(__dirname, '..', '..', '..', '..', 'src');

function sourceFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const file = path.join(dir, name);
    return statSync(file).isDirectory() ? sourceFiles(file) : [file];
  });
}

describe('src/ spawns no processes', () => {
  const files = sourceFiles(SRC);

  it('finds the sources', () => {
    expect(files.some((file) => file.endsWith(path.join('netlink', 'socket.ts')))).to.equal(true);
  });

  it('contains no child_process, exec or spawn', () => {
    // Any route to a process goes through child_process (or a bare exec/spawn/fork it exported);
    // RegExp.prototype.exec is not one, hence the lookbehind for a dot.
    const pattern =
      /child_process|\bexecSync\b|\bexecFile(Sync)?\b|\bspawn(Sync)?\b|(?<![.\w])exec\(|(?<![.\w])fork\(/;
    const offenders = files.filter((file) => pattern.test(readFileSync(file, 'utf8')));
    expect(offenders).to.deep.equal([]);
  });
});
