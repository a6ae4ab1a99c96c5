/** Shared set-up for the HTTP tests: a real PeerService over the fake kernel, behind the app. */
import { expect } from 'chai';
import type { Response } from 'supertest';
import request from 'supertest';
import { TokenStore, type ScopedTokens } from '../../../src/http';
import { createApp } from '../../../src/http/app';
import { type ClientDefaults, PeerService } from '../../../src/peers';
import { FakeKernel } from '../support/fake-kernel';
import { type CapturedLog, captureLog } from '../support/log-capture';
import { recording } from '../../support/response-recorder';

export const NOW = Date.parse('2026-03-01T12:00:00.000Z');

/** The plan fields of a listed data cap without a billing period (DESIGN §3). */
export const NO_PERIOD = {
  period: null,
  period_start: null,
  next_reset: null,
  previous_period_used_bytes: null,
} as const;

export function setup(
  options: {
    /** One admin token (shorthand for `tokens: { admin: [token], read: [] }`). */
    token?: string;
    tokens?: ScopedTokens;
    kernel?: FakeKernel;
    endpointHost?: string | null;
    /** Where the app logs; a fresh capture when absent. Shared with a server around the app. */
    log?: CapturedLog;
    /** A dual-stack interface: its IPv6 address and prefix (issue 18), e.g. "fd42::1/64". */
    address6?: string;
    /** The daemon-wide client config defaults (issue 31); absent: the daemon's own. */
    clientDefaults?: ClientDefaults;
  } = {},
) {
  const kernel = options.kernel ?? FakeKernel.withInterface({ address6: options.address6 });
  const [address6, prefix6] = options.address6?.split('/') ?? [];
  const log = options.log ?? captureLog();
  const service = new PeerService({
    kernel,
    interfaceName: 'wg0',
    endpointHost: options.endpointHost === undefined ? 'vpn.example.net' : options.endpointHost,
    logger: log.logger,
    now: () => NOW,
    addresses6:
      address6 === undefined ? [] : [{ address: address6, prefixLength: Number(prefix6) }],
    ...(options.clientDefaults === undefined ? {} : { clientDefaults: options.clientDefaults }),
  });
  const scoped =
    options.tokens ?? (options.token === undefined ? null : { admin: [options.token], read: [] });
  const tokens = scoped === null ? null : new TokenStore(scoped);
  const app = createApp({ service, tokens, logger: log.logger });
  return { kernel, log, app, http: request(recording(app)), tokens, service };
}

/** A key whose standard base64 holds '+', '/' and '=' ("++++////...="). */
export const SLASHY_KEY = Buffer.concat([
  Buffer.from([0xfb, 0xef, 0xbe, 0xff, 0xff, 0xff]),
  Buffer.alloc(26, 0x41),
]).toString('base64');

export function key(n: number): string {
  return Buffer.alloc(32, n).toString('base64');
}

/** Percent-encodes / + = as a careful client does. */
export function encoded(publicKey: string): string {
  return encodeURIComponent(publicKey);
}

export function urlSafe(publicKey: string): string {
  return publicKey.replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

/**
 * DESIGN §3: every failure is JSON {success: false, error: <sentence>, code: <UPPER_SNAKE>}
 * (+ details), never HTML, never a stack trace.
 */
export function expectError(res: Response, status: number, code: string): void {
  expect(res.status, JSON.stringify(res.body)).to.equal(status);
  expect(res.headers['content-type']).to.match(/^application\/json/);
  expect(res.body.success).to.equal(false);
  expect(res.body.code).to.equal(code);
  expect(res.body.code).to.match(/^[A-Z][A-Z0-9]*(_[A-Z0-9]+)*$/);
  expect(res.body.error).to.be.a('string').and.not.equal('');
  const allowed = ['success', 'error', 'code', 'details'];
  expect(Object.keys(res.body).every((k) => allowed.includes(k))).to.equal(true);
  expect(res.text).to.not.match(/<html|<!DOCTYPE|\n\s+at /i);
}
