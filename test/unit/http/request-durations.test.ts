import { expect } from 'chai';
import { Histogram, Registry } from 'prom-client';
import {
  REQUEST_BUCKETS,
  REQUEST_DURATION_METRIC,
  RequestDurations,
} from '../../../src/http/request-durations';

/** Label sets and seconds: every bucket, the bounds themselves, beyond the last, and zero. */
const OBSERVATIONS: Array<[string, string, string, number]> = [
  ['GET', '/api/peers', '200', 0],
  ['GET', '/api/peers', '200', 0.0004],
  ['GET', '/api/peers', '200', 0.001],
  ['GET', '/api/peers', '200', 0.0011],
  ['GET', '/api/peers', '304', 0.02],
  ['POST', '/api/peer', '201', 0.3],
  ['GET', '/api/peers', '200', 2.5],
  ['DELETE', '/api/peer/:publicKey', '404', 10],
  ['DELETE', '/api/peer/:publicKey', '404', 12.75],
  ['GET', 'unmatched', '404', 0.123456789],
  ['GET', '/api/peers', '200', 0.05],
];

function twins(): {
  ours: Registry;
  theirs: Registry;
  durations: RequestDurations;
  reference: Histogram<'method' | 'route' | 'code'>;
} {
  const ours = new Registry();
  const theirs = new Registry();
  const durations = new RequestDurations(ours);
  const reference = new Histogram({
    name: REQUEST_DURATION_METRIC,
    help: durations.help,
    labelNames: ['method', 'route', 'code'] as const,
    buckets: [...REQUEST_BUCKETS],
    registers: [theirs],
  });
  return { ours, theirs, durations, reference };
}

describe('http/request-durations: the request histogram, twin of a prom-client Histogram', () => {
  it('writes the very text prom-client writes for the same observations', async () => {
    const { ours, theirs, durations, reference } = twins();
    for (const [method, route, code, seconds] of OBSERVATIONS) {
      durations.observe(method, route, code, seconds);
      reference.observe({ method, route, code }, seconds);
    }
    const text = await ours.metrics();
    expect(text).to.equal(await theirs.metrics());
    // Not an empty agreement: the series and the buckets are there.
    expect(text).to.include(
      'wg_peerd_http_request_duration_seconds_bucket{le="0.001",method="GET",route="/api/peers",code="200"} 3',
    );
    expect(text).to.include(
      'wg_peerd_http_request_duration_seconds_bucket{le="+Inf",method="DELETE",route="/api/peer/:publicKey",code="404"} 2',
    );
    // The JSON form too, but for prom-client's exemplar slots (null or undefined), unused here.
    const withoutExemplars = (json: unknown): unknown =>
      JSON.parse(JSON.stringify(json, (k, v: unknown) => (k === 'exemplar' ? undefined : v)));
    expect(withoutExemplars(await ours.getMetricsAsJSON())).to.deep.equal(
      withoutExemplars(await theirs.getMetricsAsJSON()),
    );
  });

  it('a held series adds to the same counts as observe() by labels', async () => {
    const { ours, theirs, durations, reference } = twins();
    const held = durations.seriesOf('GET', '/api/peers', '200');
    for (const seconds of [0.002, 0.2, 7]) {
      held.observe(seconds);
      durations.observe('GET', '/api/peers', '200', seconds);
      reference.observe({ method: 'GET', route: '/api/peers', code: '200' }, seconds);
      reference.observe({ method: 'GET', route: '/api/peers', code: '200' }, seconds);
    }
    expect(await ours.metrics()).to.equal(await theirs.metrics());
  });

  it('ignores a duration that is not a finite number, and is emptied by resetMetrics', async () => {
    const { ours, durations } = twins();
    durations.observe('GET', '/api/peers', '200', NaN);
    durations.observe('GET', '/api/peers', '200', Infinity);
    expect(await ours.metrics()).to.include(
      'wg_peerd_http_request_duration_seconds_count{method="GET",route="/api/peers",code="200"} 0',
    );
    ours.resetMetrics();
    expect(await ours.metrics()).not.to.include('_count');
  });
});
