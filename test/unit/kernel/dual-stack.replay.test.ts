import { expect } from 'chai';
import { replay } from '../../support/transcripts';
import { DUAL_IFB, type DualStackResult, dualStack } from '../../transcripts/dual-stack';

// A dual-stack peer's limit and cap (issue 18), replayed from a transcript recorded in the VM:
// every expectation is checked against what tc and nft reported at that moment, and against the
// layout of src/kernel/shaper/addressing6.ts (IPv6 header offsets from iproute2's f_u32.c:
// destination at 24, source at 8; the hashed last word 12 bytes further) and
// src/kernel/quota/dual-stack.ts. Never against values taken from the code's own output.

interface TcFilter {
  protocol: string;
  pref: number;
  options?: {
    fh: string;
    flowid?: string;
    match?: { value: string; mask: string; offmask: string; off: number };
    actions?: Array<{ kind: string; to_dev?: string }>;
  };
}

type NftEntry = Record<string, Record<string, unknown>>;

const keyNodes = (filters: unknown): TcFilter[] =>
  ((filters ?? []) as TcFilter[]).filter((f) => f.options?.flowid !== undefined);

const nft = (listing: unknown): NftEntry[] =>
  ((listing as { nftables?: NftEntry[] } | null)?.nftables ?? []).filter((e) => !e['metainfo']);

describe('dual-stack peers over recorded kernel exchanges (issue 18)', () => {
  let result: DualStackResult;
  let oracle: Record<string, unknown>;

  before(async () => {
    ({ result, oracle } = await replay(dualStack));
  });

  it('limits the peer’s IPv6 traffic with protocol ipv6 key nodes into the class of its IPv4 address', () => {
    const limited = oracle.limited as Record<string, unknown>;
    const down = keyNodes(limited.wgFilters6);
    const up = keyNodes(limited.ifbFilters6);
    // Listed with `prio 11`: tc leaves the priority out of each entry of that one priority.
    expect(down.map((f) => [f.protocol, f.options!.flowid])).to.deep.equal([['ipv6', '1:2']]);
    expect(down[0]!.options!.match).to.deep.equal({
      value: '2',
      mask: 'ffffffff',
      offmask: '',
      off: 36,
    });
    expect(up.map((f) => f.options!.flowid)).to.deep.equal(['1:2']);
    expect(up[0]!.options!.match).to.deep.equal({
      value: '2',
      mask: 'ffffffff',
      offmask: '',
      off: 20,
    });
    expect(String(limited.wgClasses)).to.match(/class htb 1:2 parent 1:ffff/);
    expect(result.limits).to.deep.equal([['10.78.0.2', { download: 200_000, upload: 200_000 }]]);
  });

  it('redirects IPv6 uploads to the IFB with an ingress filter of their own', () => {
    const ingress = ((oracle.limited as Record<string, unknown>).ingressFilters ??
      []) as TcFilter[];
    const redirects = ingress.filter((f) =>
      f.options?.actions?.some((a) => a.kind === 'mirred' && a.to_dev === DUAL_IFB),
    );
    expect(redirects.map((f) => [f.protocol, f.pref]).sort()).to.deep.equal([
      ['ip', 10],
      ['ipv6', 11],
    ]);
  });

  it('removes the IPv6 key nodes with the limit', () => {
    const unlimited = oracle.unlimited as Record<string, unknown>;
    expect(keyNodes(unlimited.wgFilters6)).to.deep.equal([]);
    expect(keyNodes(unlimited.ifbFilters6)).to.deep.equal([]);
    expect(String(unlimited.wgClasses)).to.not.match(/class htb 1:2 /);
  });

  it('counts both families in one quota object, which caps and caps6 both lead to', () => {
    const capped = nft(oracle.capped);
    const quotas = capped.flatMap((e) => (e['quota'] ? [e['quota']] : []));
    expect(quotas.map((q) => [q['family'], q['name'], q['bytes']])).to.deep.equal([
      ['inet', 'q_10_78_0_2', 5_000_000],
    ]);
    const maps = Object.fromEntries(
      capped.flatMap((e) => (e['map'] ? [[e['map']['name'], e['map']['elem']]] : [])),
    );
    expect(maps).to.deep.equal({
      caps: [['10.78.0.2', 'q_10_78_0_2']],
      caps6: [['fd78::2', 'q_10_78_0_2']],
    });
    expect(result.caps).to.deep.equal([
      ['10.78.0.2', { quotaBytes: 5_000_000, usedBytes: 0, enforced: true }],
    ]);
  });

  it('removes the object and both elements with the cap', () => {
    const uncapped = nft(oracle.uncapped);
    expect(uncapped.filter((e) => e['quota'])).to.deep.equal([]);
    const elements = uncapped.flatMap((e) => (e['map']?.['elem'] as unknown[] | undefined) ?? []);
    expect(elements).to.deep.equal([]);
    expect(result.capsAfterRemoval).to.deep.equal([]);
  });
});
