import { expect } from 'chai';
import { spawnSync } from 'node:child_process';
import { constants as osConstants } from 'node:os';
import { cpSync, mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { Config } from '../../../src/config';
import { openKernel } from '../../../src/kernel';
import { RTM_GETLINK, RTM_NEWLINK } from '../../../src/kernel/rtnetlink';
import { EXIT_FAILURE, StartupError, startDaemon } from '../../../src/main';
import type { Transport } from '../../../src/netlink';
import { NLMSG_ERROR, NLM_F_CAPPED } from '../../../src/netlink/constants';
import {
  NativeAddonMissingError,
  buildCommand,
  loadNativeFrom,
  type RequireFunction,
} from '../../../src/netlink/native';
import { testConfig } from '../support/config';
import { captureLog } from '../support/log-capture';

const ROOT = path.resolve(__dirname, '../../../..');

const config = (): Config => testConfig();

/**
 * A netlink socket of a kernel without WireGuard, answering as Linux does (net/core/rtnetlink.c):
 * RTM_GETLINK of a missing name is ENODEV; RTM_NEWLINK of kind "wireguard", once request_module
 * found nothing, is EOPNOTSUPP; anything else is refused with EPERM so the test sees it.
 */
function kernelWithoutWireGuard(protocol: number): Transport {
  let handler: ((error: Error | null, datagram?: Buffer) => void) | undefined;
  const answer = (request: Buffer, errno: number): void => {
    // struct nlmsgerr (linux/netlink.h): nlmsghdr, int error, the request's own nlmsghdr
    // (capped: the header alone).
    const reply = Buffer.alloc(16 + 4 + 16);
    reply.writeUInt32LE(reply.length, 0);
    reply.writeUInt16LE(NLMSG_ERROR, 4);
    reply.writeUInt16LE(NLM_F_CAPPED, 6);
    reply.writeUInt32LE(request.readUInt32LE(8), 8); // seq
    reply.writeUInt32LE(4242, 12); // our port id
    reply.writeInt32LE(-errno, 16);
    request.copy(reply, 20, 0, 16);
    setImmediate(() => handler?.(null, reply));
  };
  return {
    protocol,
    portId: 4242,
    send(datagram) {
      const type = datagram.readUInt16LE(4);
      const { ENODEV, EOPNOTSUPP, EPERM } = osConstants.errno;
      answer(datagram, type === RTM_GETLINK ? ENODEV : type === RTM_NEWLINK ? EOPNOTSUPP : EPERM);
    },
    receive(h) {
      handler = h;
    },
    setBusy() {},
    close() {},
  };
}

describe('a start that explains itself', function () {
  it('says to modprobe wireguard, and what to install when there is no module', async () => {
    let error: unknown;
    try {
      await startDaemon(config(), {
        openKernel: () => openKernel(kernelWithoutWireGuard),
        logger: captureLog().logger,
      });
    } catch (e) {
      error = e;
    }
    expect(error).to.be.instanceOf(StartupError);
    const { message, exitStatus } = error as StartupError;
    expect(exitStatus).to.equal(EXIT_FAILURE);
    expect(message).to.not.contain('\n');
    expect(message)
      .to.contain('WireGuard')
      .and.contain('`modprobe wireguard`')
      .and.contain('when modprobe finds no module')
      .and.contain('Linux 5.6')
      .and.contain('linux-image-amd64');
  });

  it('names the command that builds the addon there, and its build tools, when neither a build nor a fitting prebuild exists', () => {
    // node-gyp-build itself looks in /opt/wg-peerd: no build/Release, no prebuilds/linux-x64.
    const loaded: string[] = [];
    let error: unknown;
    try {
      loadNativeFrom('/opt/wg-peerd', (file) => loaded.push(file));
    } catch (e) {
      error = e;
    }
    expect(loaded).to.deep.equal([]);
    expect(error).to.be.instanceOf(NativeAddonMissingError);
    expect((error as Error).message).to.equal(
      'the native netlink addon is not built and no prebuilt one fits this machine: ' +
        'build it with `cd /opt/wg-peerd && npm run install` ' +
        '(it needs gcc, make and python3: `apt-get install build-essential python3`)',
    );
  });

  it('quotes the directory in that command for the shell when it holds a space or a quote', () => {
    expect(buildCommand('/opt/wg-peerd')).to.equal('cd /opt/wg-peerd && npm run install');
    expect(buildCommand("/srv/it's here")).to.equal("cd '/srv/it'\\''s here' && npm run install");
  });

  it('loads the file node-gyp-build chose, a prebuild when there is no local build', () => {
    const prebuild = '/opt/wg-peerd/prebuilds/linux-x64/node.napi.glibc.node';
    const loaded: string[] = [];
    loadNativeFrom(
      '/opt/wg-peerd',
      (file) => loaded.push(file),
      () => prebuild,
    );
    expect(loaded).to.deep.equal([prebuild]);
  });

  it("says the same command for an addon that exists but does not load, with the loader's words (issue 32)", () => {
    // What the dynamic linker says of a prebuild made for a newer glibc than this machine's.
    const prebuild = '/opt/wg-peerd/prebuilds/linux-x64/wg-peerd.glibc.node';
    const tooOld: RequireFunction = () => {
      throw new Error(
        `/lib/x86_64-linux-gnu/libc.so.6: version \`GLIBC_2.32' not found (required by ${prebuild})`,
      );
    };
    let error: unknown;
    try {
      loadNativeFrom('/opt/wg-peerd', tooOld, () => prebuild);
    } catch (e) {
      error = e;
    }
    expect(error).to.be.instanceOf(NativeAddonMissingError);
    expect((error as Error).message).to.equal(
      `the native netlink addon ${prebuild} does not load on this machine ` +
        `(/lib/x86_64-linux-gnu/libc.so.6: version \`GLIBC_2.32' not found (required by ${prebuild})): ` +
        'build it with `cd /opt/wg-peerd && npm run install` ' +
        '(it needs gcc, make and python3: `apt-get install build-essential python3`)',
    );
  });

  it('prints that one line and exits 1 when the built daemon runs without build/Release', function () {
    this.timeout(30_000);
    // A copy of the built daemon next to the real node_modules, but without build/: what a
    // checkout looks like after `npm ci --ignore-scripts` or a failed native build.
    const dir = mkdtempSync(path.join(tmpdir(), 'wg-peerd-nobuild-'));
    try {
      cpSync(path.join(ROOT, 'dist', 'src'), path.join(dir, 'dist', 'src'), { recursive: true });
      cpSync(path.join(ROOT, 'package.json'), path.join(dir, 'package.json'));
      symlinkSync(path.join(ROOT, 'node_modules'), path.join(dir, 'node_modules'));
      const result = spawnSync(
        process.execPath,
        [path.join(dir, 'dist', 'src', 'main.js'), '--listen', '127.0.0.1:59999'],
        { encoding: 'utf8', timeout: 20_000, env: { PATH: process.env.PATH ?? '' } },
      );
      expect(result.status, result.stderr).to.equal(EXIT_FAILURE);
      const lines = result.stderr.split('\n').filter((l) => l !== '');
      expect(lines).to.deep.equal([
        'wg-peerd: the native netlink addon is not built and no prebuilt one fits this machine: ' +
          `build it with \`cd ${dir} && npm run install\` ` +
          '(it needs gcc, make and python3: `apt-get install build-essential python3`)',
      ]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
