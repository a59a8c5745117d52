import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { descriptorsFor, loadEnvoyConfig } from '../../src/envoy/routes.js';
import { type RlsRequest, startTestService, type TestService } from '../helpers/service.js';

/** Issue 22, item 1: a client inventing a new Authorization value for every request got fresh quota every
 * time. The shipped envoy.yaml now also sends [category, remote_address] and the bundled config limits it:
 * whatever tokens one address invents, it gets no more than its address's limits. The descriptors are the
 * ones the model of envoy.yaml says Envoy sends for such a request. */

const envoy = loadEnvoyConfig('envoy/envoy.yaml');

function request(token: string, peer: string): RlsRequest {
  const descriptors = descriptorsFor(envoy, { method: 'GET', path: '/invoices', headers: { authorization: token }, remoteAddress: peer });
  return { domain: 'property-api', descriptors: descriptors.map((entries) => ({ entries })) };
}

describe('the backstop per client address, shipped by default', () => {
  let t: TestService;
  beforeAll(async () => {
    t = await startTestService(); // the bundled config, the memory store, a clock that stands still
  });
  afterAll(async () => t?.close());

  it('200 invented tokens a second from one address are admitted, the 201st is not; another address is untouched', async () => {
    const codes: string[] = [];
    for (let i = 0; i < 201; i++) codes.push((await t.rls.call(request(`Bearer invented-${i}`, '198.51.100.7'))).overall_code);
    expect(codes.filter((c) => c === 'OK')).toHaveLength(200);
    expect(codes[200]).toBe('OVER_LIMIT');
    const office = await t.rls.call(request('Bearer a-real-client', '203.0.113.20'));
    expect(office.overall_code).toBe('OK');
    // The token's own limit is still the one a real client meets first, and reports in the headers.
    expect(office.response_headers_to_add.find((h) => h.key === 'X-RateLimit-Limit')?.value).toBe('1000');
  });
});
