import { expect } from 'chai';
import {
  ConfigError,
  helpText,
  parseConfig,
  type Config,
  type Environment,
} from '../../../src/config';

/** A file's text, private to its owner (0600) unless a mode is given. */
type FakeFile = string | { text: string; mode: number };
type FakeFiles = Record<string, FakeFile>;

function files(map: FakeFiles) {
  return (path: string): { text: string; mode: number } => {
    const file = map[path];
    if (file === undefined) {
      throw Object.assign(new Error(`ENOENT: no such file or directory, open '${path}'`), {
        code: 'ENOENT',
      });
    }
    // 0o100000: S_IFREG, a regular file, as fstat reports it.
    return typeof file === 'string'
      ? { text: file, mode: 0o100600 }
      : { text: file.text, mode: 0o100000 | file.mode };
  };
}

const ADMIN = 'admin-token-0123456789abcdef';
const ADMIN2 = 'admin-token-second-9876543210';
const READ = 'read-token-0123456789abcdef';
const NO_TOKENS = { admin: [], read: [] };

function parse(argv: string[], env: Environment = {}, fs: FakeFiles = {}): Config {
  const outcome = parseConfig(argv, env, files(fs));
  if (outcome.kind !== 'run') throw new Error('expected a configuration');
  return outcome.config;
}

function failure(argv: string[], env: Environment = {}, fs: FakeFiles = {}): string {
  try {
    parseConfig(argv, env, files(fs));
  } catch (error) {
    expect(error).to.be.instanceOf(ConfigError);
    const message = (error as Error).message;
    expect(message, 'one line').to.not.contain('\n');
    return message;
  }
  throw new Error('expected a ConfigError');
}

// DESIGN §4: the table of flags, variables and defaults.
describe('config: defaults of DESIGN §4', () => {
  it('starts on wg0, 127.0.0.1:8080, 10.8.0.1/24, port 51820, no token, no endpoint host', () => {
    expect(parse([])).to.deep.equal({
      interfaceName: 'wg0',
      listen: { host: '127.0.0.1', port: 8080 },
      endpointHost: null,
      clientDns: null,
      clientAllowedIps: null,
      clientMtu: null,
      clientKeepalive: 25,
      presharedKeys: false,
      tokens: NO_TOKENS,
      tokenSources: { admin: null, read: null },
      logLevel: 'info',
      address: { address: '10.8.0.1', prefixLength: 24 },
      address6: null,
      listenPort: 51820,
      allowUnauthenticated: false,
      listMaxAgeMs: 1000,
      metricsPerPeer: true,
      maxConnections: 512,
      eventHistory: 10000,
      webhooksFile: null,
      maxEventStreams: 64,
      eventStreamStallS: 60,
      webhookRetryForMs: 36 * 3_600_000,
      tls: null, // the TLS files are read for real in tls-options.test.ts
      stateDir: null,
      usageSaveIntervalS: 10,
    });
  });
});

describe('config: flags and environment', () => {
  it('reads every flag, as "--flag value" and as "--flag=value"', () => {
    const config = parse(
      [
        '--interface',
        'wg9',
        '--listen=[::1]:9000',
        '--endpoint-host',
        'vpn.example.net',
        '--token-file',
        '/etc/wg-peerd/admin.tokens',
        '--read-token-file=/etc/wg-peerd/read.tokens',
        '--address=10.20.0.1/16',
        '--address6',
        'fd42:20::1/64',
        '--listen-port',
        '51000',
        '--allow-unauthenticated',
        '--list-max-age=0',
        '--max-connections',
        '100',
        '--log-level',
        'debug',
        '--metrics-per-peer=false',
        '--event-history',
        '500',
        '--webhooks-file=/etc/wg-peerd/webhooks',
        '--max-event-streams',
        '99',
        '--event-stream-stall=5',
        '--webhook-retry-for',
        '1d12h',
        '--state-dir',
        '/var/lib/wg-peerd',
        '--usage-save-interval=30',
        '--client-dns',
        '10.8.0.1, fd42::1',
        '--client-allowed-ips=0.0.0.0/0,::/0',
        '--client-mtu',
        '1420',
        '--client-keepalive=0',
        '--preshared-keys',
      ],
      {},
      { '/etc/wg-peerd/admin.tokens': `${ADMIN}\n`, '/etc/wg-peerd/read.tokens': `${READ}\n` },
    );
    expect(config).to.deep.equal({
      interfaceName: 'wg9',
      listen: { host: '::1', port: 9000 },
      endpointHost: 'vpn.example.net',
      clientDns: ['10.8.0.1', 'fd42::1'],
      clientAllowedIps: ['0.0.0.0/0', '::/0'],
      clientMtu: 1420,
      clientKeepalive: 0,
      presharedKeys: true,
      tokens: { admin: [ADMIN], read: [READ] },
      tokenSources: {
        admin: { kind: 'file', path: '/etc/wg-peerd/admin.tokens', flag: '--token-file' },
        read: { kind: 'file', path: '/etc/wg-peerd/read.tokens', flag: '--read-token-file' },
      },
      logLevel: 'debug',
      address: { address: '10.20.0.1', prefixLength: 16 },
      address6: { address: 'fd42:20::1', prefixLength: 64 },
      listenPort: 51000,
      allowUnauthenticated: true,
      listMaxAgeMs: 0,
      metricsPerPeer: false,
      maxConnections: 100,
      eventHistory: 500,
      webhooksFile: '/etc/wg-peerd/webhooks',
      maxEventStreams: 99,
      eventStreamStallS: 5,
      webhookRetryForMs: 36 * 3_600_000,
      tls: null, // the TLS files are read for real in tls-options.test.ts
      stateDir: '/var/lib/wg-peerd',
      usageSaveIntervalS: 30,
    });
  });

  it('reads every environment variable, the token variable holding the token itself', () => {
    const config = parse([], {
      WG_PEERD_INTERFACE: 'wgx',
      WG_PEERD_LISTEN: '0.0.0.0:8081',
      WG_PEERD_ENDPOINT_HOST: '203.0.113.5',
      WG_PEERD_TOKEN: ADMIN,
      WG_PEERD_READ_TOKEN: ` ${READ}\n`,
      WG_PEERD_ADDRESS: '172.16.0.1/24',
      WG_PEERD_ADDRESS6: 'FD00:0:0:0:0:0:AB:1/120',
      WG_PEERD_LISTEN_PORT: '4500',
      WG_PEERD_ALLOW_UNAUTHENTICATED: '1',
      WG_PEERD_LIST_MAX_AGE_MS: '60000',
      WG_PEERD_LOG_LEVEL: 'warn',
      WG_PEERD_METRICS_PER_PEER: 'false',
      WG_PEERD_MAX_CONNECTIONS: '64',
      WG_PEERD_EVENT_HISTORY: '20',
      WG_PEERD_WEBHOOKS_FILE: '/w',
      WG_PEERD_MAX_EVENT_STREAMS: '63',
      WG_PEERD_EVENT_STREAM_STALL: '3600',
      WG_PEERD_WEBHOOK_RETRY_FOR: '90m',
      WG_PEERD_STATE_DIR: '/srv/state',
      WG_PEERD_USAGE_SAVE_INTERVAL: '3600',
      WG_PEERD_CLIENT_DNS: '1.1.1.1',
      WG_PEERD_CLIENT_ALLOWED_IPS: '192.168.0.0/16',
      WG_PEERD_CLIENT_MTU: '9000',
      WG_PEERD_CLIENT_KEEPALIVE: '65535',
      WG_PEERD_PRESHARED_KEYS: '1',
    });
    expect(config).to.deep.equal({
      interfaceName: 'wgx',
      listen: { host: '0.0.0.0', port: 8081 },
      endpointHost: '203.0.113.5',
      clientDns: ['1.1.1.1'],
      clientAllowedIps: ['192.168.0.0/16'],
      clientMtu: 9000,
      clientKeepalive: 65535,
      presharedKeys: true,
      tokens: { admin: [ADMIN], read: [READ] },
      tokenSources: {
        admin: { kind: 'value', tokens: [ADMIN] },
        read: { kind: 'value', tokens: [READ] },
      },
      logLevel: 'warn',
      address: { address: '172.16.0.1', prefixLength: 24 },
      address6: { address: 'fd00::ab:1', prefixLength: 120 },
      listenPort: 4500,
      allowUnauthenticated: true,
      listMaxAgeMs: 60000,
      metricsPerPeer: false,
      maxConnections: 64,
      eventHistory: 20,
      webhooksFile: '/w',
      maxEventStreams: 63,
      eventStreamStallS: 3600,
      webhookRetryForMs: 90 * 60_000,
      tls: null, // the TLS files are read for real in tls-options.test.ts
      stateDir: '/srv/state',
      usageSaveIntervalS: 3600,
    });
  });

  it('lets a flag win over its variable', () => {
    const config = parse(
      ['--interface', 'wg-flag', '--token-file', '/t'],
      {
        WG_PEERD_INTERFACE: 'wg-env',
        WG_PEERD_TOKEN: ADMIN2,
      },
      { '/t': ADMIN },
    );
    expect(config.interfaceName).to.equal('wg-flag');
    expect(config.tokens.admin).to.deep.equal([ADMIN]);
  });

  it('treats an empty variable as unset', () => {
    const config = parse([], {
      WG_PEERD_INTERFACE: '',
      WG_PEERD_TOKEN: '',
      WG_PEERD_LOG_LEVEL: '',
    });
    expect(config.interfaceName).to.equal('wg0');
    expect(config.tokens).to.deep.equal(NO_TOKENS);
    expect(config.logLevel).to.equal('info');
  });

  it('ignores whitespace around the token in the token file', () => {
    expect(
      parse(['--token-file', '/t'], {}, { '/t': `  \n ${ADMIN} \r\n\n` }).tokens.admin,
    ).to.deep.equal([ADMIN]);
  });

  it('reads several tokens per file, one a line, skipping blank and # comment lines', () => {
    const text = `# grafana, added in November\n${ADMIN}\n\n  # the old one, until Friday\n${ADMIN2}\r\n${ADMIN}\n`;
    expect(parse(['--token-file', '/t'], {}, { '/t': text }).tokens.admin).to.deep.equal([
      ADMIN,
      ADMIN2,
    ]);
  });

  it('accepts every log level of pino and silent', () => {
    for (const level of ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']) {
      expect(parse(['--log-level', level]).logLevel).to.equal(level);
    }
  });

  it('answers --version (and -V) with the version outcome', () => {
    expect(parseConfig(['--version'], {}, files({}))).to.deep.equal({ kind: 'version' });
    expect(parseConfig(['-V'], {}, files({}))).to.deep.equal({ kind: 'version' });
  });

  it('answers --help (and -h) with the help outcome', () => {
    expect(parseConfig(['--help'], {}, files({}))).to.deep.equal({ kind: 'help' });
    expect(parseConfig(['--interface', 'x', '-h'], {}, files({}))).to.deep.equal({ kind: 'help' });
  });

  it('prints every flag, variable and default of DESIGN §4 in --help', () => {
    const text = helpText();
    const table: Array<[string, string, string]> = [
      ['--interface NAME', 'WG_PEERD_INTERFACE', 'wg0'],
      ['--listen HOST:PORT', 'WG_PEERD_LISTEN', '127.0.0.1:8080'],
      ['--endpoint-host HOST', 'WG_PEERD_ENDPOINT_HOST', "the host's primary IPv4 address"],
      ['--token-file PATH', 'WG_PEERD_TOKEN (the token itself)', 'none'],
      ['--address CIDR', 'WG_PEERD_ADDRESS', '10.8.0.1/24'],
      ['--address6 CIDR', 'WG_PEERD_ADDRESS6', 'none (IPv4 only)'],
      ['--listen-port PORT', 'WG_PEERD_LISTEN_PORT', '51820'],
      ['--allow-unauthenticated', 'WG_PEERD_ALLOW_UNAUTHENTICATED=1', 'off'],
      ['--list-max-age MS', 'WG_PEERD_LIST_MAX_AGE_MS', '1000'],
      ['--read-token-file PATH', 'WG_PEERD_READ_TOKEN (the token itself)', 'none'],
      ['--log-level LEVEL', 'WG_PEERD_LOG_LEVEL', 'info'],
      ['--max-connections N', 'WG_PEERD_MAX_CONNECTIONS', '512'],
      ['--metrics-per-peer BOOL', 'WG_PEERD_METRICS_PER_PEER', 'true'],
      ['--event-history N', 'WG_PEERD_EVENT_HISTORY', '10000'],
      ['--webhooks-file PATH', 'WG_PEERD_WEBHOOKS_FILE', 'none'],
      ['--max-event-streams N', 'WG_PEERD_MAX_EVENT_STREAMS', '64'],
      ['--event-stream-stall S', 'WG_PEERD_EVENT_STREAM_STALL', '60'],
      ['--webhook-retry-for DURATION', 'WG_PEERD_WEBHOOK_RETRY_FOR', '36h'],
      ['--client-dns ADDRS', 'WG_PEERD_CLIENT_DNS', 'none (no DNS line)'],
      ['--client-allowed-ips CIDRS', 'WG_PEERD_CLIENT_ALLOWED_IPS', "the interface's subnet"],
      ['--client-mtu BYTES', 'WG_PEERD_CLIENT_MTU', 'none (no MTU line)'],
      ['--client-keepalive S', 'WG_PEERD_CLIENT_KEEPALIVE', '25'],
      ['--preshared-keys', 'WG_PEERD_PRESHARED_KEYS=1', 'off'],
    ];
    // One block per option: the flag on its own line, then its indented lines.
    const blocks = text.split(/\n(?= {2}--)/);
    for (const [flag, env, def] of table) {
      const block = blocks.find((b) => b.startsWith(`  ${flag}\n`));
      expect(block, flag).to.be.a('string');
      expect(block).to.contain(`env: ${env};`).and.contain(`default: ${def}`);
    }
  });

  // Issue 21: a terminal of 80 columns shows --help without wrapping.
  it('fits --help in 80 columns', () => {
    for (const line of helpText().split('\n')) {
      expect(line.length, line).to.be.at.most(80);
    }
  });
});

// Issue 21: every option takes "--flag value" and "--flag=value", or refuses with the reason.
describe('config: the command line (issue 21)', () => {
  it('gives one message for every unknown option, long or short, with or without value', () => {
    for (const [argv, name] of [
      [['--port', '1'], '--port'],
      [['--port=1'], '--port'],
      [['--Interface', 'wg0'], '--Interface'],
      [['-x'], '-x'],
      [['-p', '1'], '-p'],
      [['-i=wg0'], '-i'],
    ] as Array<[string[], string]>) {
      expect(failure(argv), argv.join(' ')).to.equal(`unknown option ${name} (see --help)`);
    }
  });

  it('refuses a value given to --help, --version or a switch, naming it, not as unknown', () => {
    for (const name of ['--version', '--help', '--allow-unauthenticated']) {
      expect(failure([`${name}=1`])).to.equal(`${name} takes no value`);
    }
  });

  it('takes --flag=value as --flag value, also for a value that starts with a dash', () => {
    expect(parse(['--interface=wg1']).interfaceName).to.equal('wg1');
    expect(parse(['--interface', 'wg1']).interfaceName).to.equal('wg1');
    expect(parse(['--interface=-wg']).interfaceName).to.equal('-wg');
    expect(parse(['--interface', '-wg']).interfaceName).to.equal('-wg');
  });

  it('refuses an empty --flag= with the reason of the value, not as a missing value', () => {
    expect(failure(['--interface='])).to.match(/^--interface must be an interface name .* not ""$/);
  });

  it('refuses anything after "--" as an argument', () => {
    expect(failure(['--', 'wg0'])).to.contain('unexpected argument "wg0"');
  });

  it('reads arguments in order: the first of -h, -V or a bad one decides', () => {
    expect(parseConfig(['-V', '--bogus'], {}, files({}))).to.deep.equal({ kind: 'version' });
    expect(failure(['--bogus', '-V'])).to.equal('unknown option --bogus (see --help)');
  });
});

// Issue 31: the daemon-wide defaults of new peers' client configs.
describe('config: --client-dns, --client-allowed-ips, --client-mtu, --client-keepalive (issue 31)', () => {
  it('refuses a DNS entry that is not an IP address, naming it and the flag or variable', () => {
    const message = failure(['--client-dns', '1.1.1.1,dns.example']);
    expect(message).to.contain('--client-dns').and.contain('"dns.example"');
    expect(failure([], { WG_PEERD_CLIENT_DNS: '1.1.1' })).to.contain('WG_PEERD_CLIENT_DNS');
    expect(failure(['--client-dns', '1.1.1.1,,8.8.8.8'])).to.contain('""');
  });

  it('refuses allowed IPs that are not CIDRs of their family', () => {
    for (const bad of ['10.0.0.0', '10.0.0.0/33', '::/129', 'fd00::/x', '0.0.0.0/0;::/0']) {
      expect(failure(['--client-allowed-ips', bad]), bad).to.contain('--client-allowed-ips');
    }
  });

  it('takes an MTU from 1280 to 9000 and a keepalive from 0 to 65535, nothing else', () => {
    expect(parse(['--client-mtu', '1280']).clientMtu).to.equal(1280);
    for (const bad of ['1279', '9001', '1420.5']) {
      expect(failure(['--client-mtu', bad])).to.contain('1280 to 9000');
    }
    expect(failure(['--client-keepalive', '65536'])).to.contain('0 to 65535');
    expect(failure([], { WG_PEERD_PRESHARED_KEYS: 'yes' })).to.contain('1 or 0');
  });
});

describe('config: --list-max-age (DESIGN §5)', () => {
  it('takes whole milliseconds from 0 to 60000', () => {
    expect(parse(['--list-max-age', '0']).listMaxAgeMs).to.equal(0);
    expect(parse(['--list-max-age', '60000']).listMaxAgeMs).to.equal(60000);
    expect(parse([], { WG_PEERD_LIST_MAX_AGE_MS: '250' }).listMaxAgeMs).to.equal(250);
  });

  it('refuses anything else, naming the flag or the variable', () => {
    for (const bad of ['60001', '-1', '1.5', '1e3', 'soon', '100000']) {
      expect(failure(['--list-max-age', bad]))
        .to.contain('--list-max-age')
        .and.contain('0 to 60000');
    }
    expect(failure([], { WG_PEERD_LIST_MAX_AGE_MS: 'x' })).to.contain('WG_PEERD_LIST_MAX_AGE_MS');
  });
});

describe('config: --max-connections (issue 10)', () => {
  it('takes a whole number from 1 to 65535, from the flag or the variable', () => {
    expect(parse(['--max-connections', '1']).maxConnections).to.equal(1);
    expect(parse(['--max-connections=65535']).maxConnections).to.equal(65535);
    expect(parse([], { WG_PEERD_MAX_CONNECTIONS: '20' }).maxConnections).to.equal(20);
  });

  it('refuses anything else, naming the flag or the variable', () => {
    for (const bad of ['0', '65536', '-1', '1.5', 'many', '']) {
      expect(failure(['--max-connections', bad]))
        .to.contain('--max-connections')
        .and.contain('1 to 65535');
    }
    expect(failure([], { WG_PEERD_MAX_CONNECTIONS: 'x' })).to.contain('WG_PEERD_MAX_CONNECTIONS');
  });
});

// Issue 30: streams are bounded below the connections, so a full set leaves the API room.
describe('config: --max-event-streams and --event-stream-stall (issue 30)', () => {
  it('keeps 64 streams by default, fewer when --max-connections leaves less room', () => {
    expect(parse([]).maxEventStreams).to.equal(64);
    expect(parse(['--max-connections', '20']).maxEventStreams).to.equal(19);
    expect(parse(['--max-connections', '1']).maxEventStreams).to.equal(0);
  });

  it('refuses a number of streams not below --max-connections, naming both as given', () => {
    expect(failure(['--max-event-streams', '512'])).to.equal(
      '--max-event-streams (512) must be below --max-connections (512): event streams may not ' +
        'take every connection from the API; lower the one or raise the other',
    );
    expect(failure(['--max-connections=100'], { WG_PEERD_MAX_EVENT_STREAMS: '100' })).to.match(
      /^WG_PEERD_MAX_EVENT_STREAMS \(100\) must be below --max-connections \(100\)/,
    );
    expect(parse(['--max-event-streams', '0', '--max-connections', '1']).maxEventStreams).to.equal(
      0,
    );
  });

  it('takes whole seconds from 1 to 3600 for the stall bound, and nothing else', () => {
    expect(parse(['--event-stream-stall', '1']).eventStreamStallS).to.equal(1);
    for (const bad of ['0', '3601', '1.5', '60s']) {
      expect(failure(['--event-stream-stall', bad])).to.contain(
        '--event-stream-stall must be a whole number of seconds from 1 to 3600',
      );
    }
  });
});

// DESIGN §4: --webhook-retry-for DURATION, 36h by default (about the Standard Webhooks schedule).
describe('config: --webhook-retry-for (issue 30)', () => {
  it('takes durations in d, h, m and s, largest unit first', () => {
    const ms = (text: string) => parse(['--webhook-retry-for', text]).webhookRetryForMs;
    expect(ms('36h')).to.equal(129_600_000);
    expect(ms('1d12h')).to.equal(129_600_000);
    expect(ms('90m')).to.equal(5_400_000);
    expect(ms('1m')).to.equal(60_000);
    expect(ms('30d')).to.equal(30 * 86_400_000);
    expect(ms('2h30m15s')).to.equal(9_015_000);
  });

  it('refuses a bare number, a unit out of order, and anything under 1m or over 30d', () => {
    for (const bad of ['36', 'h', '12h1d', '59s', '31d', '1.5h', '-1h', '36 h']) {
      expect(failure([], { WG_PEERD_WEBHOOK_RETRY_FOR: bad })).to.equal(
        `WG_PEERD_WEBHOOK_RETRY_FOR must be a duration from 1m to 30d in d, h, m and s (like 36h or 1d12h), not "${bad}"`,
      );
    }
  });
});

// DESIGN §4: a WG_PEERD_* variable that is no setting stops the start (issue 30: a mistyped
// WG_PEERD_TOKEN_FILE used to leave the daemon unauthenticated without a word).
describe('config: unknown WG_PEERD_* variables (issue 30)', () => {
  it('refuses WG_PEERD_TOKEN_FILE, naming WG_PEERD_TOKEN and what it holds', () => {
    expect(failure([], { WG_PEERD_TOKEN_FILE: '/etc/wg-peerd/admin.tokens' })).to.equal(
      'unknown environment variable WG_PEERD_TOKEN_FILE (wg-peerd --help lists them): did you ' +
        'mean WG_PEERD_TOKEN? It holds the token itself; a path goes as --token-file PATH',
    );
  });

  it('names the known variable nearest to a typo', () => {
    const cases: Array<[string, string]> = [
      ['WG_PEERD_LISTN', 'WG_PEERD_LISTEN'],
      ['WG_PEERD_INTERFAEC', 'WG_PEERD_INTERFACE'],
      ['WG_PEERD_STATEDIR', 'WG_PEERD_STATE_DIR'],
      ['WG_PEERD_MAX_EVENT_STREAM', 'WG_PEERD_MAX_EVENT_STREAMS'],
      ['WG_PEERD_WEBHOOK_FILE', 'WG_PEERD_WEBHOOKS_FILE'],
      ['WG_PEERD_READ_TOKEN_FILE', 'WG_PEERD_READ_TOKEN'],
    ];
    for (const [typo, known] of cases) {
      expect(failure([], { [typo]: 'x' }), typo).to.match(
        new RegExp(`^unknown environment variable ${typo} .*did you mean ${known}\\?`),
      );
    }
  });

  it('refuses it even when every flag is given on the command line', () => {
    expect(failure(['--interface', 'wg1'], { WG_PEERD_INTERFACES: 'wg2' })).to.contain(
      'did you mean WG_PEERD_INTERFACE?',
    );
  });

  it("ignores an empty one (it counts as unset), other programs' variables, and the names the project's own files set around the daemon", () => {
    const config = parse([], {
      WG_PEERD_TOKEN_FILE: '',
      WG_PEERD: 'x',
      WGPEERD_TOKEN: 'x',
      WG_PEERD_ARGS: '--log-level debug',
      WG_PEERD_VM: '1',
      WG_PEERD_VM_MEM: '2048',
      WG_PEERD_TEST_KERNEL: '6.12',
      WG_PEERD_PREFIX: '/opt/x',
    });
    expect(config.tokens).to.deep.equal(NO_TOKENS);
  });
});

describe('config: --state-dir and --usage-save-interval (issue 16)', () => {
  it('keeps nothing by default, and saves usage every 10 s once a state dir is given', () => {
    expect(parse([]).stateDir).to.equal(null);
    expect(parse(['--state-dir', '/var/lib/wg-peerd'])).to.include({
      stateDir: '/var/lib/wg-peerd',
      usageSaveIntervalS: 10,
    });
  });

  it('refuses a relative state dir: the daemon would find another one from another cwd', () => {
    expect(failure(['--state-dir', 'state']))
      .to.contain('--state-dir')
      .and.contain('absolute');
    expect(failure([], { WG_PEERD_STATE_DIR: './s' })).to.contain('WG_PEERD_STATE_DIR');
  });

  it('takes whole seconds from 1 to 3600 between usage checkpoints, and nothing else', () => {
    expect(parse(['--usage-save-interval', '1']).usageSaveIntervalS).to.equal(1);
    expect(parse([], { WG_PEERD_USAGE_SAVE_INTERVAL: '3600' }).usageSaveIntervalS).to.equal(3600);
    for (const bad of ['0', '3601', '-1', '1.5', 'often', '']) {
      expect(failure(['--usage-save-interval', bad]))
        .to.contain('--usage-save-interval')
        .and.contain('1 to 3600');
    }
  });
});

describe('config: listen address and authentication (DESIGN §3)', () => {
  it('refuses a non-loopback address without a token', () => {
    for (const listen of ['0.0.0.0:8080', '192.0.2.1:8080', '[::]:8080']) {
      expect(failure(['--listen', listen]))
        .to.contain('without authentication')
        .and.contain('--allow-unauthenticated');
    }
  });

  it('serves a non-loopback address with a token, or when told to run unauthenticated', () => {
    expect(
      parse(['--listen', '0.0.0.0:8080'], { WG_PEERD_TOKEN: ADMIN }).tokens.admin,
    ).to.deep.equal([ADMIN]);
    expect(
      parse(['--listen', '0.0.0.0:8080', '--allow-unauthenticated']).allowUnauthenticated,
    ).to.equal(true);
    expect(
      parse(['--listen', '0.0.0.0:8080'], { WG_PEERD_ALLOW_UNAUTHENTICATED: '1' }).tokens,
    ).to.deep.equal(NO_TOKENS);
  });

  it('counts read tokens alone as authentication (a monitoring-only daemon)', () => {
    expect(parse(['--listen', '0.0.0.0:8080'], { WG_PEERD_READ_TOKEN: READ }).tokens).to.deep.equal(
      { admin: [], read: [READ] },
    );
  });

  it('keeps a token listed in both files as admin only', () => {
    const config = parse(
      ['--token-file', '/a', '--read-token-file', '/r'],
      {},
      {
        '/a': ADMIN,
        '/r': `${READ}\n${ADMIN}\n`,
      },
    );
    expect(config.tokens).to.deep.equal({ admin: [ADMIN], read: [READ] });
  });

  it('serves loopback addresses without a token', () => {
    for (const listen of ['127.0.0.1:1', '127.8.9.10:8080', '[::1]:8080', 'localhost:8080']) {
      expect(parse(['--listen', listen]).tokens).to.deep.equal(NO_TOKENS);
    }
  });

  it('does not take WG_PEERD_ALLOW_UNAUTHENTICATED=0 as permission', () => {
    expect(
      failure(['--listen', '0.0.0.0:8080'], { WG_PEERD_ALLOW_UNAUTHENTICATED: '0' }),
    ).to.contain('without authentication');
  });
});

describe('config: bad configuration is one clear line', () => {
  const cases: Array<[string, string[], Environment, FakeFiles, RegExp]> = [
    ['an unknown flag', ['--port', '1'], {}, {}, /unknown option --port/],
    ['a positional argument', ['wg0'], {}, {}, /unexpected argument "wg0"/],
    ['a flag without value', ['--interface'], {}, {}, /--interface needs a value/],
    [
      'a flag followed by a flag',
      ['--interface', '--listen', '127.0.0.1:1'],
      {},
      {},
      /--interface needs a value/,
    ],
    ['a flag given twice', ['--interface', 'a', '--interface', 'b'], {}, {}, /more than once/],
    ['a value for a switch', ['--allow-unauthenticated=yes'], {}, {}, /takes no value/],
    ['a long interface name', ['--interface', 'a-very-long-name0'], {}, {}, /1 to 15 characters/],
    ['an interface name with a slash', ['--interface', 'wg/0'], {}, {}, /interface name/],
    ['a listen address without port', ['--listen', '127.0.0.1'], {}, {}, /HOST:PORT/],
    ['a listen port out of range', ['--listen', '127.0.0.1:70000'], {}, {}, /1 to 65535/],
    [
      'a listen host that is a name',
      ['--listen', 'example.com:80'],
      {},
      {},
      /IP address or localhost/,
    ],
    ['an unbracketed IPv6 listen address', ['--listen', '::1:8080'], {}, {}, /HOST:PORT/],
    ['a listen port of 0', ['--listen-port', '0'], {}, {}, /--listen-port must be a port number/],
    [
      'a non-numeric listen port',
      [],
      { WG_PEERD_LISTEN_PORT: 'fifty' },
      {},
      /WG_PEERD_LISTEN_PORT must be a port/,
    ],
    ['an address without prefix', ['--address', '10.8.0.1'], {}, {}, /like 10.8.0.1\/24/],
    ['an address that is not IPv4', ['--address', 'fd00::1/64'], {}, {}, /IPv4 address/],
    ['an address with octets over 255', ['--address', '10.8.0.300/24'], {}, {}, /IPv4 address/],
    ['a /31 address', ['--address', '10.8.0.1/31'], {}, {}, /\/16 to \/30/],
    ['a /32 address', ['--address', '10.8.0.1/32'], {}, {}, /\/16 to \/30/],
    [
      'a /15 address (too wide for speed limits)',
      ['--address', '10.8.0.1/15'],
      {},
      {},
      /\/16 to \/30/,
    ],
    ['the network address', ['--address', '10.8.0.0/24'], {}, {}, /network address/],
    ['the broadcast address', ['--address', '10.8.0.255/24'], {}, {}, /broadcast address/],
    // issue 18: --address6 is a unicast IPv6 address with a prefix from /64 to /120.
    ['an IPv6 address without prefix', ['--address6', 'fd42::1'], {}, {}, /like fd42:42:42::1\/64/],
    ['an IPv4 address as --address6', ['--address6', '10.8.0.1/24'], {}, {}, /IPv6 address/],
    ['IPv6 with two "::"', ['--address6', 'fd42::1::2/64'], {}, {}, /IPv6 address/],
    ['IPv6 with a group of 5 digits', ['--address6', 'fd42::12345/64'], {}, {}, /IPv6 address/],
    ['IPv6 with nine groups', ['--address6', '1:2:3:4:5:6:7:8:9/64'], {}, {}, /IPv6 address/],
    ['IPv6 with a zone', ['--address6', 'fd42::1%wg0/64'], {}, {}, /IPv6 address/],
    ['a prefix over 128', [], { WG_PEERD_ADDRESS6: 'fd42::1/129' }, {}, /WG_PEERD_ADDRESS6 must/],
    ['a /63 prefix (wider than one link)', ['--address6', 'fd42::1/63'], {}, {}, /\/64 to \/120/],
    ['a /121 prefix (too small)', ['--address6', 'fd42::1/121'], {}, {}, /\/64 to \/120/],
    ['a /128 prefix (no room for a peer)', ['--address6', 'fd42::1/128'], {}, {}, /\/64 to \/120/],
    ['a link-local address', ['--address6', 'fe80::1/64'], {}, {}, /link-local/],
    ['a multicast address', ['--address6', 'ff02::1/64'], {}, {}, /multicast/],
    [
      "the prefix's Subnet-Router anycast address",
      ['--address6', 'fd42:0:0:1::/64'],
      {},
      {},
      /Subnet-Router anycast address of its prefix/,
    ],
    [
      'an endpoint host with a port',
      ['--endpoint-host', 'vpn.example.net:51820'],
      {},
      {},
      /without port/,
    ],
    [
      'an endpoint host with spaces',
      ['--endpoint-host', 'vpn example'],
      {},
      {},
      /host name or an IP/,
    ],
    [
      'a missing token file',
      ['--token-file', '/nope'],
      {},
      {},
      /--token-file \/nope cannot be read \(ENOENT\)/,
    ],
    ['an empty token file', ['--token-file', '/t'], {}, { '/t': ' \n' }, /holds no token/],
    [
      'a token file of comments only',
      ['--read-token-file', '/t'],
      {},
      { '/t': '# nothing yet\n' },
      /--read-token-file \/t holds no token/,
    ],
    ['a token with spaces', [], { WG_PEERD_TOKEN: 'two words' }, {}, /without spaces/],
    [
      'a short token in a file, naming its line but not the token',
      ['--token-file', '/t'],
      {},
      { '/t': `${ADMIN}\nshort-secret\n` },
      /^--token-file \/t line 2 holds a token of 12 characters; tokens need at least 16 \(/,
    ],
    [
      'a short token in a variable',
      [],
      { WG_PEERD_READ_TOKEN: 'fifteen-chars-x' },
      {},
      /WG_PEERD_READ_TOKEN holds a token of 15 characters; tokens need at least 16/,
    ],
    [
      'a token file readable by others',
      ['--token-file', '/t'],
      {},
      { '/t': { text: ADMIN, mode: 0o644 } },
      /--token-file \/t may be read by group or others \(mode 0644\): chmod 600/,
    ],
    [
      'a read token file open to its group',
      ['--read-token-file', '/r'],
      {},
      { '/r': { text: READ, mode: 0o640 } },
      /--read-token-file \/r may be read by group or others \(mode 0640\)/,
    ],
    [
      'a token file writable by its group',
      ['--token-file', '/t'],
      {},
      { '/t': { text: ADMIN, mode: 0o620 } },
      /mode 0620/,
    ],
    [
      'a bad log level',
      ['--log-level', 'verbose'],
      {},
      {},
      /--log-level must be one of fatal, error, warn, info, debug, trace, silent, not "verbose"/,
    ],
    ['a bad allow value', [], { WG_PEERD_ALLOW_UNAUTHENTICATED: 'yes' }, {}, /must be 1 or 0/],
    [
      'an event history of no event',
      ['--event-history', '0'],
      {},
      {},
      /--event-history must be a whole number from 1 to 1000000, not "0"/,
    ],
    [
      'an event history too large for memory',
      [],
      { WG_PEERD_EVENT_HISTORY: '5000000' },
      {},
      /WG_PEERD_EVENT_HISTORY must be a whole number from 1 to 1000000/,
    ],
    [
      'a metrics-per-peer value other than true or false',
      ['--metrics-per-peer=no'],
      {},
      {},
      /--metrics-per-peer must be true or false, not "no"/,
    ],
  ];
  for (const [what, argv, env, fs, pattern] of cases) {
    it(`refuses ${what}`, () => {
      expect(failure(argv, env, fs)).to.match(pattern);
    });
  }

  it('takes --metrics-per-peer as true/false (or 1/0), the flag winning over its variable', () => {
    expect(parse(['--metrics-per-peer', 'false']).metricsPerPeer).to.equal(false);
    expect(parse(['--metrics-per-peer=0']).metricsPerPeer).to.equal(false);
    expect(parse([], { WG_PEERD_METRICS_PER_PEER: 'false' }).metricsPerPeer).to.equal(false);
    expect(
      parse(['--metrics-per-peer=true'], { WG_PEERD_METRICS_PER_PEER: 'false' }).metricsPerPeer,
    ).to.equal(true);
  });

  it('accepts endpoint hosts as names, IPv4 and IPv6 (brackets optional)', () => {
    expect(parse(['--endpoint-host', 'vpn.example.net']).endpointHost).to.equal('vpn.example.net');
    expect(parse(['--endpoint-host', '198.51.100.1']).endpointHost).to.equal('198.51.100.1');
    expect(parse(['--endpoint-host', '2001:db8::1']).endpointHost).to.equal('2001:db8::1');
    expect(parse(['--endpoint-host', '[2001:db8::1]']).endpointHost).to.equal('2001:db8::1');
  });
});
