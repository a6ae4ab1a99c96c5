/**
 * A whole daemon Config for in-process start-up tests: the defaults of the options table
 * (src/config.ts), on a free loopback port with a fixed endpoint host. A new option needs
 * nothing here.
 */
import { parseConfig, type Config } from '../../../src/config';

export function testConfig(overrides: Partial<Config> = {}): Config {
  const outcome = parseConfig([], {}, () => {
    throw new Error('the defaults read no token file');
  });
  if (outcome.kind !== 'run') throw new Error('the defaults are a configuration');
  return {
    ...outcome.config,
    listen: { host: '127.0.0.1', port: 0 },
    endpointHost: 'vpn.example.net',
    ...overrides,
  };
}
