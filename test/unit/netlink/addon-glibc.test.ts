/**
 * The addon loads on glibc 2.28 and later (issue 32): the release's prebuilt addon needed glibc
 * 2.32 for one function (strerrorname_np), so Debian 11 and Ubuntu 20.04 (glibc 2.31) got none.
 * The dynamic linker refuses a library that asks for a symbol version its libc lacks ("version
 * `GLIBC_2.32' not found"), and each symbol's version is written in the library: `objdump -T`
 * (binutils, there wherever the addon can be built) lists it. Here the addon this checkout loads
 * (node-gyp-build's choice: build/Release, else a fitting prebuild) and any prebuild beside it
 * are read. And the errno names the addon gives its errors, now its own table instead of glibc's
 * function, are checked against the numbers Node.js knows (libuv's, from the same headers).
 */
import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { constants, tmpdir } from 'node:os';
import path from 'node:path';
import nodeGypBuild from 'node-gyp-build';
import { sendUnixDatagram } from '../../../src/netlink/native';

const ROOT = path.resolve(__dirname, '../../../..');

/** The oldest glibc the release supports: RHEL 8's 2.28 (Debian 11 and Ubuntu 20.04 have 2.31). */
const OLDEST_GLIBC = [2, 28] as const;

/** The GLIBC_x.y[.z] versions a dynamic symbol table (objdump -T) asks for, newest last. */
function glibcVersions(objdump: string): string[] {
  const found = new Set<string>();
  for (const match of objdump.matchAll(/\bGLIBC_(\d+(?:\.\d+)+)\b/g)) found.add(match[1]!);
  return [...found].sort(compareVersions);
}

function compareVersions(a: string, b: string): number {
  const x = a.split('.').map(Number);
  const y = b.split('.').map(Number);
  for (let i = 0; i < Math.max(x.length, y.length); i += 1) {
    const d = (x[i] ?? 0) - (y[i] ?? 0);
    if (d !== 0) return d;
  }
  return 0;
}

function prebuilds(dir: string): string[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir).flatMap((name) => {
    const file = path.join(dir, name);
    if (statSync(file).isDirectory()) return prebuilds(file);
    return file.endsWith('.node') ? [file] : [];
  });
}

describe('the native addon on older glibc (issue 32)', () => {
  it('reads the versions of a dynamic symbol table as objdump -T prints it (checks the check)', () => {
    const sample = [
      '0000000000000000      DF *UND*  0000000000000000 (GLIBC_2.2.5) socket',
      '0000000000000000      DF *UND*  0000000000000000 (GLIBC_2.32) strerrorname_np',
      '0000000000000000  w   DF *UND*  0000000000000000  GLIBC_2.2.5 __cxa_finalize',
      '0000000000000000      DF *UND*  0000000000000000 (GLIBC_2.4)  __stack_chk_fail',
      '0000000000000000  w   D  *UND*  0000000000000000  Base        napi_create_error',
    ].join('\n');
    expect(glibcVersions(sample)).to.deep.equal(['2.2.5', '2.4', '2.32']);
    expect(compareVersions('2.32', OLDEST_GLIBC.join('.'))).to.be.above(0);
  });

  const addons = [nodeGypBuild.resolve(ROOT), ...prebuilds(path.join(ROOT, 'prebuilds'))];
  for (const addon of [...new Set(addons)]) {
    it(`${path.relative(ROOT, addon)} asks for no glibc symbol newer than ${OLDEST_GLIBC.join('.')}`, () => {
      const table = execFileSync('objdump', ['-T', addon], { encoding: 'utf8' });
      const versions = glibcVersions(table);
      expect(versions, 'objdump -T found no GLIBC version at all').to.not.be.empty;
      const newer = versions.filter((v) => compareVersions(v, OLDEST_GLIBC.join('.')) > 0);
      const symbols = table
        .split('\n')
        .filter((line) => newer.some((v) => line.includes(`GLIBC_${v}`)));
      expect(symbols).to.deep.equal([]);
    });
  }
});

describe("the native addon's errno names (its own table, issue 32)", () => {
  let dir: string;
  beforeEach(() => {
    dir = mkdtempSync(path.join(tmpdir(), 'wg-peerd-errno-'));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  function failure(address: string): { code: unknown; errno: unknown } {
    try {
      sendUnixDatagram(address, Buffer.from('READY=1'));
    } catch (error) {
      const { code, errno } = error as { code?: unknown; errno?: unknown };
      return { code, errno };
    }
    throw new Error(`sending to ${address} did not fail`);
  }

  it('names each errno as Linux does, with the number Node.js knows for that name', async () => {
    const file = path.join(dir, 'file');
    writeFileSync(file, '');
    const stream = net.createServer();
    const streamPath = path.join(dir, 'stream');
    await new Promise<void>((resolve) => stream.listen(streamPath, resolve));
    try {
      const cases: Array<[string, string]> = [
        [path.join(dir, 'nobody'), 'ENOENT'], // no such file
        [path.join(file, 'below'), 'ENOTDIR'], // a file where a directory should be
        [file, 'ECONNREFUSED'], // a file that is no socket
        [streamPath, 'EPROTOTYPE'], // a stream socket: a datagram cannot go there
        [`@${'x'.repeat(200)}`, 'ENAMETOOLONG'], // longer than sun_path
      ];
      const got = cases.map(([address]) => failure(address));
      expect(got).to.deep.equal(
        cases.map(([, code]) => ({
          code,
          errno: constants.errno[code as keyof typeof constants.errno],
        })),
      );
    } finally {
      stream.close();
    }
  });
});
