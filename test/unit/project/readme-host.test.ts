/**
 * The README's dual-stack host set-up and its Uninstall section (issue 32): the names it tells
 * an operator to delete are the ones the code gives the kernel objects (src/kernel), the state
 * directory is the unit's, and every file the host set-up tells them to create is removed.
 */
import { expect } from 'chai';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { quotaTableName } from '../../../src/kernel/quota/naming';
import { ifbNameFor } from '../../../src/kernel/shaper/addressing';
import { suspensionTableName } from '../../../src/kernel/suspension';

const ROOT = path.resolve(__dirname, '../../../..');
const README = readFileSync(path.join(ROOT, 'README.md'), 'utf8');

/** The text of the `## title` section, up to the next `## `. */
function section(title: string): string {
  const start = README.indexOf(`\n## ${title}\n`);
  expect(start, title).to.be.greaterThan(0);
  const end = README.indexOf('\n## ', start + 1);
  return README.slice(start, end === -1 ? undefined : end);
}

/** The bodies of the ```sh blocks of `text`. */
function shellBlocks(text: string): string {
  return [...text.matchAll(/```sh\n([\s\S]*?)```/g)].map((m) => m[1]!).join('\n');
}

describe('README.md: Uninstall (issue 32)', () => {
  const uninstall = section('Uninstall');
  const commands = shellBlocks(uninstall);

  it('comes after Troubleshooting, before Development', () => {
    const titles = [...README.matchAll(/^## (.+)$/gm)].map((m) => m[1]!);
    expect(titles.indexOf('Uninstall')).to.equal(titles.indexOf('Troubleshooting') + 1);
    expect(titles.indexOf('Development')).to.equal(titles.indexOf('Uninstall') + 1);
  });

  it('deletes the IFB device and the nf_tables tables by the names the code gives them', () => {
    expect(commands).to.contain('ip link del wg0');
    expect(commands).to.contain(`ip link del ${ifbNameFor('wg0')}`);
    // The caps' table: ip on an IPv4-only interface, inet on a dual-stack one.
    expect(commands).to.contain(`nft delete table ip ${quotaTableName('wg0')}`);
    expect(commands).to.contain(`nft delete table inet ${quotaTableName('wg0')}`);
    expect(commands).to.contain(`nft delete table ip ${suspensionTableName('wg0')}`);
    expect(commands).to.contain(`nft delete table ip6 ${suspensionTableName('wg0')}`);
  });

  it("removes the state directories the units make (StateDirectory=) and the units' files", () => {
    const unit = readFileSync(path.join(ROOT, 'contrib/systemd/wg-peerd.service'), 'utf8');
    const template = readFileSync(path.join(ROOT, 'contrib/systemd/wg-peerd@.service'), 'utf8');
    const dir = /^StateDirectory=(.+)$/m.exec(unit)![1]!;
    const dirs = /^StateDirectory=(.+)$/m.exec(template)![1]!.replace('%i', '*');
    expect(commands).to.contain(`/var/lib/${dir} `);
    expect(commands).to.contain(`/var/lib/${dirs} `);
    for (const file of ['wg-peerd.service', 'wg-peerd@.service']) {
      expect(commands).to.contain(`/etc/systemd/system/${file}`);
    }
    expect(commands).to.contain('/etc/default/wg-peerd-*');
  });

  it('removes every file and nftables table the host set-up tells the operator to create', () => {
    const setUp = shellBlocks(section('Host set-up for a working VPN'));
    const created = [...setUp.matchAll(/>\s*(\/etc\/\S+)/g)].map((m) => m[1]!);
    expect(created).to.include.members([
      '/etc/modules-load.d/wg-peerd.conf',
      '/etc/sysctl.d/90-wg-peerd.conf',
      '/etc/sysctl.d/91-wg-peerd-ipv6.conf',
    ]);
    for (const file of created) expect(commands, file).to.contain(file);
    // And the nftables tables it loads.
    const tables = [...setUp.matchAll(/^\s*table (\w+) ([\w-]+) \{/gm)].map(
      (m) => `${m[1]} ${m[2]}`,
    );
    expect(tables).to.include.members(['inet vpn-host', 'ip vpn-nat', 'ip6 vpn-nat6']);
    for (const table of tables) expect(commands, table).to.contain(`nft delete table ${table}`);
  });
});

describe('README.md: dual-stack host set-up (issue 32)', () => {
  const setUp = section('Host set-up for a working VPN');

  it('enables IPv6 forwarding at once and at every boot, keeping router advertisements on the uplink', () => {
    const commands = shellBlocks(setUp);
    expect(commands).to.contain('sysctl -w net.ipv6.conf.all.forwarding=1');
    expect(commands).to.contain("'net.ipv6.conf.all.forwarding = 1'");
    expect(commands).to.contain('accept_ra=2');
  });

  it('masquerades the unique-local prefix that its --address6 example gives the interface', () => {
    const example = /--address6 (fd[0-9a-f:]+)::1\/64/.exec(setUp);
    expect(example).to.not.equal(null);
    expect(setUp).to.contain(`ip6 saddr ${example![1]}::/64 oifname "$UPLINK" masquerade`);
  });

  it('offers a routed prefix instead, with the trade-off of each', () => {
    expect(setUp).to.match(/\*\*A routed prefix\*\*, no NAT/);
    expect(setUp).to.match(/nobody\s+can reach a client from outside/);
    expect(setUp).to.match(/reachable from the internet/);
  });
});
