import { expect } from 'chai';
import { replay } from '../../support/transcripts';
import {
  type CaughtError,
  type LimitsResult,
  type MissingModuleResult,
  SHAPER_IFB,
  SHAPER_MODULES,
  type SkeletonResult,
  type TcSnapshot,
  shaperLimits,
  shaperMissingModule,
  shaperSkeleton,
} from '../../transcripts/shaper';

// Everything below is checked against what tc and ip reported in the VM while the transcripts
// were recorded (the oracle), and against the layout the design prescribes for the scenario's
// subnet 10.77.0.1/22: never against values taken from the shaper's own output.

interface TcFilter {
  kind: string;
  pref: number;
  protocol: string;
  options?: {
    fh: string;
    ht_divisor?: number;
    key_ht?: string;
    bkt?: string;
    flowid?: string;
    link?: string;
    match?: { value: string; mask: string; off: number };
    hash_mask?: string;
    hash_off?: number;
    actions?: Array<{
      kind: string;
      mirred_action?: string;
      direction?: string;
      to_dev?: string;
      control_action?: { type: string };
    }>;
  };
}

interface TcQdisc {
  kind: string;
  handle: string;
  root?: boolean;
  parent?: string;
  options?: { default?: string; direct_qlen?: number };
}

interface HtbClass {
  handle: string;
  parent: string;
  /** Bytes per second (tc prints bits per second). */
  rate: number;
  ceil: number;
  /** Bytes. */
  burst: number;
  quantum: number | undefined;
}

const RATE_UNITS: Record<string, number> = { '': 1, K: 1e3, M: 1e6, G: 1e9, T: 1e12 };
const SIZE_UNITS: Record<string, number> = { '': 1, K: 1024, M: 1024 * 1024, G: 1024 ** 3 };

/** "1600Kbit" → 200000 bytes/s (iproute2 sprint_rate: SI prefixes, bits). */
function parseRate(text: string): number {
  const match = /^([\d.]+)([KMGT]?)bit$/.exec(text);
  if (!match) throw new Error(`not a tc rate: ${text}`);
  return Math.round((Number(match[1]) * RATE_UNITS[match[2]]) / 8);
}

/** "2400b", "3.90625e+06Kb" → bytes (iproute2 sprint_size: binary prefixes). */
function parseSize(text: string): number {
  const match = /^([\d.e+]+)([KMG]?)b$/.exec(text);
  if (!match) throw new Error(`not a tc size: ${text}`);
  return Math.round(Number(match[1]) * SIZE_UNITS[match[2]]);
}

/** Parses `tc -d class show` lines of HTB classes. */
function parseClasses(text: string): HtbClass[] {
  return text
    .split('\n')
    .filter((line) => line.startsWith('class htb '))
    .map((line) => {
      const words = line.trim().split(/\s+/);
      const after = (word: string): string | undefined => words[words.indexOf(word) + 1];
      return {
        handle: words[2],
        parent: words[3] === 'root' ? 'root' : (after('parent') ?? ''),
        rate: parseRate(after('rate') ?? ''),
        ceil: parseRate(after('ceil') ?? ''),
        burst: parseSize((after('burst') ?? '').split('/')[0]),
        quantum: words.includes('quantum') ? Number(after('quantum')) : undefined,
      };
    });
}

function ipv4Hex(address: string): string {
  return address
    .split('.')
    .map((octet) => Number(octet).toString(16).padStart(2, '0'))
    .join('')
    .replace(/^0+(?=.)/, '');
}

/** A u32 handle as tc prints it: "100::1" (bucket 0 left out), "201:2:1", "200:". */
function fh(table: number, bucket: number, node: number): string {
  const parts = `${table.toString(16)}:${bucket ? bucket.toString(16) : ''}`;
  return node ? `${parts}:${node.toString(16)}` : `${table.toString(16)}:`;
}

/** A snapshot without the counters the traffic of the moment changes. */
function withoutCounters(snapshot: TcSnapshot): unknown {
  return JSON.parse(JSON.stringify(snapshot), (key: string, value: unknown) =>
    key === 'direct_packets_stat' ? undefined : value,
  );
}

function hexToIpv4(hex: string): string {
  const value = Number.parseInt(hex, 16);
  return [value >>> 24, (value >>> 16) & 255, (value >>> 8) & 255, value & 255].join('.');
}

function nodes(filters: unknown): Array<Required<TcFilter>['options']> {
  return ((filters as TcFilter[] | null) ?? [])
    .map((filter) => filter.options)
    .filter((options): options is Required<TcFilter>['options'] => options !== undefined);
}

function keyNodes(filters: unknown) {
  return nodes(filters).filter((node) => node.ht_divisor === undefined);
}

/** The limits tc shows on one device: address (from the key node) → rate (from its class). */
function limitsShownByTc(
  filters: unknown,
  classes: string,
  keyOffset: number,
): Map<string, number> {
  const byHandle = new Map(parseClasses(classes).map((c) => [c.handle, c]));
  const limits = new Map<string, number>();
  for (const node of keyNodes(filters)) {
    if (!node.flowid || !node.match) continue;
    expect(node.match.mask).to.equal('ffffffff');
    expect(node.match.off).to.equal(keyOffset);
    const cls = byHandle.get(node.flowid);
    expect(cls, `class ${node.flowid} of a filter`).to.not.equal(undefined);
    limits.set(hexToIpv4(node.match.value), cls!.rate);
  }
  return limits;
}

/** Burst the design gives a class: 50 ms at the rate plus 1600 bytes, at most 4 GiB - 1. */
function designBurst(rate: number): number {
  return Math.min(Math.ceil(rate * 0.05) + 1600, 0xffffffff);
}

const THIRD_OCTETS = [0, 1, 2, 3]; // 10.77.0.0/22

/** The skeleton the design prescribes on one device for 10.77.0.0/22 keyed at `off`. */
function expectSkeleton(filters: unknown, off: number): void {
  const all = nodes(filters);
  const tables = all.filter((n) => n.ht_divisor !== undefined);
  expect(tables.find((t) => t.fh === '100:')?.ht_divisor).to.equal(256);
  for (const octet of THIRD_OCTETS) {
    expect(tables.find((t) => t.fh === fh(0x200 + octet, 0, 0))?.ht_divisor).to.equal(256);
    const link = all.find((n) => n.fh === fh(0x100, octet, 1));
    expect(link, `link in bucket ${octet} of 100:`).to.include({
      link: `20${octet}:`,
      hash_mask: 'ff',
      hash_off: off,
    });
    expect(link?.match).to.include({ value: ipv4Hex(`10.77.${octet}.0`), mask: 'ffffff00', off });
  }
  const roots = all.filter((n) => n.link === '100:');
  expect(roots).to.have.length(1);
  expect(roots[0].key_ht, 'the entry point sits in the root table').to.match(/^8[0-9a-f]{2}$/);
  expect(roots[0]).to.include({ hash_mask: 'ff00', hash_off: off });
  expect(roots[0].match).to.include({ value: ipv4Hex('10.77.0.0'), mask: 'fffffc00', off });
}

function expectRedirect(snapshot: TcSnapshot): void {
  const redirects = keyNodes(snapshot.ingressFilters);
  expect(redirects).to.have.length(1);
  expect(redirects[0].match).to.include({ value: '0', mask: '0', off: 0 });
  expect(redirects[0].actions).to.have.length(1);
  expect(redirects[0].actions?.[0]).to.deep.include({
    kind: 'mirred',
    mirred_action: 'redirect',
    direction: 'egress',
    to_dev: SHAPER_IFB,
    control_action: { type: 'stolen' },
  });
}

function expectQdiscs(snapshot: TcSnapshot): void {
  const wg = snapshot.wgQdiscs as TcQdisc[];
  const htb = { kind: 'htb', handle: '1:', root: true };
  // Default class 0 is no class: unlimited traffic takes the direct queue.
  expect(wg.find((q) => q.root)).to.deep.include(htb);
  expect(wg.find((q) => q.root)?.options).to.include({ default: '0', direct_qlen: 1000 });
  expect(wg.find((q) => q.kind === 'ingress')).to.include({ handle: 'ffff:', parent: 'ffff:fff1' });
  const ifb = snapshot.ifbQdiscs as TcQdisc[];
  expect(ifb.find((q) => q.root)).to.deep.include(htb);
  expect(ifb.find((q) => q.root)?.options).to.include({ default: '0', direct_qlen: 1000 });
  const [link] = snapshot.ifbLink as Array<{ flags: string[]; linkinfo?: { info_kind?: string } }>;
  expect(link.linkinfo?.info_kind).to.equal('ifb');
  expect(link.flags).to.include('UP');
}

function expectParentClass(classes: string): void {
  const parent = parseClasses(classes).find((c) => c.handle === '1:ffff');
  expect(parent).to.include({ parent: 'root', rate: 1e12, ceil: 1e12 });
}

const writes = (step: string[]): string[] =>
  step.filter((type) => /_(NEW|DEL)/.test(type) && type !== 'RTM_NEWLINK');

describe('tc speed limits (recorded transcripts)', () => {
  describe('skeleton: built, found intact, repaired', () => {
    let result: SkeletonResult;
    let oracle: Record<string, unknown>;
    const snap = (name: string): TcSnapshot => oracle[name] as TcSnapshot;

    before(async () => {
      ({ result, oracle } = await replay(shaperSkeleton));
    });

    it('builds HTB 1: (default 0, direct_qlen 1000), ingress and an IFB that is up', () => {
      expectQdiscs(snap('built'));
      expectParentClass(snap('built').wgClasses);
      expectParentClass(snap('built').ifbClasses);
    });

    it('hashes on the third then the last octet: destination on the interface, source on the IFB', () => {
      expectSkeleton(snap('built').wgFilters, 16);
      expectSkeleton(snap('built').ifbFilters, 12);
      expect(keyNodes(snap('built').wgFilters).filter((n) => n.flowid)).to.deep.equal([]);
    });

    it('redirects everything arriving on the interface to the IFB (u32 match-all + mirred)', () => {
      expectRedirect(snap('built'));
    });

    it('finds an intact skeleton with reads only and changes nothing', () => {
      expect(writes(result.steps.intact)).to.deep.equal([]);
      // The skeleton is confirmed by a few reads; the limits are reconciled with the live
      // peers from the classes of both devices.
      expect(result.steps.intact.filter((t) => t.endsWith('dump'))).to.deep.equal([
        'RTM_GETADDR dump',
        'RTM_GETQDISC dump',
        'RTM_GETTCLASS dump',
        'RTM_GETTCLASS dump',
      ]);
      expect(withoutCounters(snap('intact'))).to.deep.equal(withoutCounters(snap('built')));
    });

    it('sets a limit with one class and one key node per device and no read', () => {
      expect(result.steps.setLimit).to.deep.equal([
        'RTM_NEWTCLASS',
        'RTM_NEWTFILTER',
        'RTM_NEWTCLASS',
        'RTM_NEWTFILTER',
      ]);
      const limited = snap('limited');
      expect(limitsShownByTc(limited.wgFilters, limited.wgClasses, 16)).to.deep.equal(
        new Map([['10.77.1.2', 200_000]]),
      );
      expect(limitsShownByTc(limited.ifbFilters, limited.ifbClasses, 12)).to.deep.equal(
        new Map([['10.77.1.2', 200_000]]),
      );
    });

    it('repairs what the operator removed: the IFB, its tree, the ingress qdisc and redirect', () => {
      const broken = snap('broken');
      expect(broken.ifbLink).to.equal(null);
      expect((broken.wgQdiscs as TcQdisc[]).map((q) => q.kind)).to.deep.equal(['htb']);
      const repaired = snap('repaired');
      expectQdiscs(repaired);
      expectSkeleton(repaired.ifbFilters, 12);
      expectRedirect(repaired);
      const [before] = snap('limited').ifbLink as Array<{ ifindex: number }>;
      const [after] = repaired.ifbLink as Array<{ ifindex: number }>;
      expect(after.ifindex, 'a new IFB').to.not.equal(before.ifindex);
    });

    it("restores the upload limit on the new IFB from the interface's class", () => {
      const repaired = snap('repaired');
      expect(limitsShownByTc(repaired.ifbFilters, repaired.ifbClasses, 12)).to.deep.equal(
        new Map([['10.77.1.2', 200_000]]),
      );
      expect(limitsShownByTc(repaired.wgFilters, repaired.wgClasses, 16)).to.deep.equal(
        new Map([['10.77.1.2', 200_000]]),
      );
    });

    it("rebuilds deleted u32 filters, the peer's key node included", () => {
      expect(snap('unfiltered').wgFilters).to.deep.equal([]);
      const refiltered = snap('refiltered');
      expectSkeleton(refiltered.wgFilters, 16);
      expect(limitsShownByTc(refiltered.wgFilters, refiltered.wgClasses, 16)).to.deep.equal(
        new Map([['10.77.1.2', 200_000]]),
      );
      // Nothing was recreated on the IFB, which was intact.
      expect(refiltered.ifbFilters).to.deep.equal(snap('repaired').ifbFilters);
    });
  });

  describe('limits: set, replace, remove, read back, restart', () => {
    let result: LimitsResult;
    let oracle: Record<string, unknown>;
    const snap = (name: string): TcSnapshot => oracle[name] as TcSnapshot;

    before(async () => {
      ({ result, oracle } = await replay(shaperLimits));
    });

    it('reads back exactly the limits tc shows on both devices', () => {
      for (const [list, name] of [
        [result.lists.set, 'set'],
        [result.lists.replace, 'replaced'],
        [result.lists.restartSet, 'restarted'],
      ] as const) {
        const shown = snap(name);
        const download = limitsShownByTc(shown.wgFilters, shown.wgClasses, 16);
        const upload = limitsShownByTc(shown.ifbFilters, shown.ifbClasses, 12);
        expect(upload, name).to.deep.equal(download);
        const expected = new Map(
          [...download].map(([address, rate]) => [
            address,
            { download: rate, upload: upload.get(address) ?? null },
          ]),
        );
        expect(new Map(list), name).to.deep.equal(expected);
      }
    });

    it('limits a peer above 4 GiB/s (64-bit rate) and one at 200,000 B/s', () => {
      const shown = limitsShownByTc(snap('set').wgFilters, snap('set').wgClasses, 16);
      expect(shown.get('10.77.1.5')).to.equal(5_000_000_000);
      expect(shown.get('10.77.0.2')).to.equal(200_000);
    });

    it("gives each class rate = ceil, an explicit quantum and the design's burst", () => {
      for (const cls of parseClasses(snap('set').wgClasses)) {
        if (cls.handle === '1:ffff') continue;
        expect(cls.parent).to.equal('1:ffff');
        expect(cls.ceil).to.equal(cls.rate);
        expect(cls.quantum).to.equal(Math.min(200_000, Math.max(1600, Math.floor(cls.rate / 10))));
        // tc turns the kernel's buffer ticks back into bytes; it loses under a microsecond.
        expect(Math.abs(cls.burst - designBurst(cls.rate))).to.be.at.most(cls.rate / 1e6 + 1);
      }
    });

    it('replaces a limit in place: one class, one key node, the new rate', () => {
      expect(writes(result.steps.replace)).to.deep.equal([
        'RTM_NEWTCLASS',
        'RTM_NEWTFILTER',
        'RTM_NEWTCLASS',
        'RTM_NEWTFILTER',
      ]);
      const replaced = snap('replaced');
      const classes = parseClasses(replaced.wgClasses).filter((c) => c.handle === '1:2');
      expect(classes).to.have.length(1);
      expect(classes[0].rate).to.equal(300_000);
      const nodesFor = keyNodes(replaced.wgFilters).filter(
        (n) => n.match?.value === ipv4Hex('10.77.0.2'),
      );
      expect(nodesFor).to.have.length(1);
    });

    it('removes filter and class on both devices without dumping them', () => {
      expect(result.steps.remove.filter((t) => /TFILTER dump|TCLASS dump/.test(t))).to.deep.equal(
        [],
      );
      expect(writes(result.steps.remove)).to.deep.equal([
        'RTM_DELTFILTER',
        'RTM_DELTCLASS',
        'RTM_DELTFILTER',
        'RTM_DELTCLASS',
      ]);
      const removed = snap('removed');
      for (const [filters, classes] of [
        [removed.wgFilters, removed.wgClasses],
        [removed.ifbFilters, removed.ifbClasses],
      ] as const) {
        expect(parseClasses(classes).map((c) => c.handle)).to.not.include('1:2');
        expect(keyNodes(filters).map((n) => n.match?.value)).to.not.include(ipv4Hex('10.77.0.2'));
        expect(keyNodes(filters).map((n) => n.fh)).to.not.include(fh(0x200, 2, 1));
      }
      expect(result.lists.remove).to.deep.equal([
        ['10.77.1.5', { download: 5_000_000_000, upload: 5_000_000_000 }],
      ]);
    });

    it('treats removing an absent limit as done', () => {
      // The kernel answered ENOENT to each delete; removeLimit resolved.
      expect(writes(result.steps.removeAgain)).to.have.length(4);
    });

    it("refuses an address outside the interface's subnet before asking the kernel, as a setup conflict", () => {
      // A peer whose tunnel address lies outside the interface's subnet is the operator's to fix
      // (the domain answers 409); nothing was sent for it, or the replay would have failed.
      expect(result.outside?.name).to.equal('SetupConflictError');
      expect(result.outside?.message).to.contain('10.78.0.2').and.contain('10.77.0.0/22');
    });

    it('after a restart lists the limits from the kernel alone and rebuilds nothing', () => {
      expect(result.lists.restart).to.deep.equal(result.lists.remove);
      // Download from the interface's classes, upload from the IFB's.
      expect(result.steps.restartList).to.deep.equal([
        'RTM_GETLINK',
        'RTM_GETADDR dump',
        'RTM_GETTCLASS dump',
        'RTM_GETLINK',
        'RTM_GETTCLASS dump',
      ]);
      // The first change of the new process checks the whole skeleton (dumps) and finds it:
      // no qdisc, table or link is created; only 1:ffff is re-sent, and the new limit.
      const restartWrites = writes(result.steps.restartSet);
      expect(restartWrites.filter((t) => t === 'RTM_NEWQDISC')).to.deep.equal([]);
      expect(restartWrites.filter((t) => t === 'RTM_NEWTFILTER')).to.have.length(2);
      const restarted = snap('restarted');
      expectQdiscs(restarted);
      expectSkeleton(restarted.wgFilters, 16);
      expectSkeleton(restarted.ifbFilters, 12);
      expect(
        limitsShownByTc(restarted.wgFilters, restarted.wgClasses, 16).get('10.77.3.254'),
      ).to.equal(1_000);
    });
  });

  describe('a kernel that cannot load the tc modules', () => {
    let result: MissingModuleResult;
    let oracle: Record<string, unknown>;

    before(async () => {
      ({ result, oracle } = await replay(shaperMissingModule));
    });

    it("names the first module the kernel lacked, with the kernel's own words", () => {
      const modules = oracle.modules as string[];
      SHAPER_MODULES.forEach((module, i) => {
        const loaded = modules[i].split(' ').filter(Boolean);
        // /proc/modules at that attempt: every earlier module loaded, this one not.
        expect(loaded).to.have.members(SHAPER_MODULES.slice(0, i));
        const error = result.attempts[i] as CaughtError;
        expect(error.name).to.equal('FacilityUnavailableError');
        expect(error.message).to.contain(`modprobe ${module}`);
        expect(['ENOENT', 'EOPNOTSUPP']).to.include(error.causeCode);
        expect(error.causeKernelMessage).to.be.a('string').and.not.equal('');
        expect(error.message).to.contain(error.causeKernelMessage!);
      });
    });

    it('succeeds once every module is there, and the skeleton is complete', () => {
      expect(result.attempts[SHAPER_MODULES.length]).to.equal(null);
      const shown = oracle.finally as TcSnapshot;
      expectQdiscs(shown);
      expectSkeleton(shown.wgFilters, 16);
      expectSkeleton(shown.ifbFilters, 12);
      expectRedirect(shown);
    });
  });
});
