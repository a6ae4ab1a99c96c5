/**
 * A whole daemon Config for in-process start-up tests: loopback on a free port, no tokens, the
 * DESIGN §4 defaults otherwise. One place, so a new Config field is added once.
 */
import type { Config } from '../../../src/config';

export function testConfig(overrides: Partial<Config> = {}): Config {
  return {
    interfaceName: 'wg0',
    listen: { host: '127.0.0.1', port: 0 },
    endpointHost: 'vpn.example.net',
    tokens: { admin: [], read: [] },
    tokenSources: { admin: null, read: null },
    logLevel: 'info',
    address: { address: '10.8.0.1', prefixLength: 24 },
    listenPort: 51820,
    allowUnauthenticated: false,
    listMaxAgeMs: 1000,
    metricsPerPeer: true,
    maxConnections: 512,
    ...overrides,
  };
}
