import { readFileSync } from 'node:fs';
import * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AdsServer } from '../helpers/ads-server.js';
import { aiGatewayConfig, aiTurn, deploymentEnv, egResources, LISTENER_DOMAIN, SHARED_DOMAIN, sharedRequest, userRequest } from '../helpers/envoy-gateway.js';
import { clientView, nameCounts } from '../helpers/envoy-headers.js';
import { metric, parseMetrics } from '../helpers/metrics.js';
import { type Daemon, freePort, runCli, startCli } from '../helpers/process.js';
import { startTlsRedis, type TlsRedis } from '../helpers/redis.js';
import { RlsClient, type RlsRequest, type RlsResponse, startTestService } from '../helpers/service.js';
import { within } from '../helpers/time.js';
import { makeCertificates } from '../helpers/tls.js';

// Tollgate in the place of envoyproxy/ratelimit under Envoy Gateway: started with the environment of Envoy
// Gateway's own rate-limit Deployment (its Redis TLS variant, test/fixtures/envoy-gateway/, ports, addresses and
// file paths changed), configs from an ADS server over Envoy's discovery protos pushing what Envoy Gateway's
// translator builds, Redis over mutual TLS, and Envoy asking over TLS with its certificate. What the client
// behind Envoy gets is read through the model of Envoy's rate-limit filter (test/helpers/envoy-headers.ts).

let certs: ReturnType<typeof makeCertificates>;
let redis: TlsRedis;
let ads: AdsServer;
let daemon: Daemon;
let env: NodeJS.ProcessEnv;
const ports = { grpc: 0, http: 0, prometheus: 0 };
const clients: RlsClient[] = [];

/** Envoy's side of the gRPC port: Envoy Gateway gives Envoy a certificate from the same CA (the `envoy` Secret). */
const rls = (withCert: boolean, port = ports.grpc): RlsClient => {
  const f = (n: string): Buffer => readFileSync(certs.file(n));
  const creds = withCert ? grpc.credentials.createSsl(f('ca.pem'), f('envoy.key'), f('envoy.pem')) : grpc.credentials.createSsl(f('ca.pem'));
  // A distinct option value: a connection of its own, so a refused handshake is not shared with the other client.
  const c = new RlsClient(port, { 'tollgate.test.cert': withCert ? 1 : 0 }, creds);
  clients.push(c);
  return c;
};
const times = async (c: RlsClient, req: RlsRequest, n: number): Promise<RlsResponse[]> => {
  const out: RlsResponse[] = [];
  for (let i = 0; i < n; i++) out.push(await c.call(req));
  return out;
};

beforeAll(async () => {
  // One CA for the envoy-rate-limit Secret (the service's certificate, also its xDS client certificate), Envoy
  // Gateway's xDS server and Envoy, as Envoy Gateway's certgen makes them.
  certs = makeCertificates([
    { name: 'ratelimit', san: 'DNS:envoy-ratelimit,IP:127.0.0.1' },
    { name: 'envoy-gateway', san: 'DNS:envoy-gateway,IP:127.0.0.1' },
    { name: 'envoy', san: 'DNS:envoy' },
  ]);
  redis = await startTlsRedis({ san: 'IP:127.0.0.1', authClients: true, password: 'redis_auth_password' });
  ads = new AdsServer();
  const f = (n: string): Buffer => readFileSync(certs.file(n));
  const adsPort = await ads.start(
    0,
    grpc.ServerCredentials.createSsl(f('ca.pem'), [{ private_key: f('envoy-gateway.key'), cert_chain: f('envoy-gateway.pem') }], true),
  );
  [ports.grpc, ports.http, ports.prometheus] = [await freePort(), await freePort(), await freePort()];
  const paths: Record<string, string> = {
    '/certs/tls.crt': certs.file('ratelimit.pem'),
    '/certs/tls.key': certs.file('ratelimit.key'),
    '/certs/ca.crt': certs.file('ca.pem'),
    '/redis-certs/tls.crt': redis.certs.file('client.pem'),
    '/redis-certs/tls.key': redis.certs.file('client.key'),
  };
  const eg = deploymentEnv('deployment-redis-tls.yaml');
  env = {
    ...Object.fromEntries(Object.entries(eg).map(([k, v]) => [k, paths[v] ?? v])),
    CONFIG_GRPC_XDS_SERVER_URL: `127.0.0.1:${adsPort}`,
    REDIS_URL: `127.0.0.1:${redis.port}`,
    PROMETHEUS_ADDR: `127.0.0.1:${ports.prometheus}`,
    // Not in Envoy Gateway's manifest: the ports it leaves at 8080 and 8081 on every address, moved to loopback;
    // and the private CA of the test's Redis, which a user adds with rateLimitDeployment.container.env.
    ...{ HOST: '127.0.0.1', PORT: String(ports.http), GRPC_HOST: '127.0.0.1', GRPC_PORT: String(ports.grpc) },
    REDIS_TLS_CACERT: redis.certs.file('ca.pem'),
    // Redis over TLS on a shared 2-core test machine: the default 25 ms round trip is missed now and then, and
    // what is tested here is the wiring, not the timeout (redis-faults.test.ts holds that).
    REDIS_TIMEOUT_MS: '500',
  };
  expect(eg).toMatchObject({ CONFIG_TYPE: 'GRPC_XDS_SOTW', GRPC_SERVER_TLS_CA_CERT: '/certs/ca.crt', REDIS_TLS_CLIENT_CERT: '/redis-certs/tls.crt' });
  daemon = await startCli(['serve'], /tollgate serving/, env);
}, 60_000);

afterAll(async () => {
  for (const c of clients) c.close();
  daemon?.child.kill('SIGTERM');
  await daemon?.exited;
  ads?.stop();
  await redis?.stop();
});

describe("Tollgate with Envoy Gateway's rate-limit Deployment", () => {
  it("before the first config: ready (FORCE_START_WITHOUT_INITIAL_CONFIG), and every decision an error, so Envoy's failure mode decides", async () => {
    const probe = await fetch(`http://127.0.0.1:${ports.http}/healthcheck`);
    expect([probe.status, await probe.text()]).toEqual([200, 'OK']);
    await expect(rls(true).call(userRequest('early'))).rejects.toMatchObject({
      code: grpc.status.UNAVAILABLE,
      details: 'no rate limit configuration loaded yet: waiting for the first from the xDS server',
    });
  });

  it('a TLS client without a certificate is refused (GRPC_SERVER_TLS_CA_CERT); Envoy, with its certificate, is served', async () => {
    await expect(rls(false).call(userRequest('anyone'), 3000)).rejects.toMatchObject({ code: grpc.status.UNAVAILABLE });
    ads.push('v1', egResources());
    const envoy = rls(true);
    await within(
      10_000,
      () =>
        envoy.call(userRequest('probe')).then(
          () => true,
          () => false,
        ),
      'the first config applied',
    );
    expect(ads.requests().at(-1)).toMatchObject({ version_info: 'v1', error_detail: null });
  });

  it('decides as the BackendTrafficPolicy says, and counts in the mutual-TLS Redis', async () => {
    const envoy = rls(true);
    expect((await times(envoy, userRequest('u-1'), 4)).map((r) => r.overall_code)).toEqual(['OK', 'OK', 'OK', 'OVER_LIMIT']);
    expect((await envoy.call(userRequest('u-2'))).overall_code).toBe('OK'); // distinct: each user its own 3 a minute
    const shared = await envoy.call(sharedRequest('10.1.2.3'));
    expect(shared.statuses[0]!.current_limit).toMatchObject({ requests_per_unit: 100, unit: 'HOUR' });
    const keys = await redis.cli('--scan', '--pattern', 'tollgate:*');
    expect(keys.split('\n').length).toBeGreaterThanOrEqual(3);
    expect(keys).not.toContain('u-1'); // values are fingerprints in keys
  });

  it("a 429 with no headers, no body and no invented names; the client sees one set of Envoy's x-ratelimit headers", async () => {
    const over = await rls(true).call(userRequest('u-1'));
    expect(over.overall_code).toBe('OVER_LIMIT');
    expect(over.response_headers_to_add).toEqual([]);
    expect(over.raw_body.length).toBe(0);
    expect(over.statuses[0]!.current_limit!.name).toBe('');
    const view = clientView(over);
    expect(view.status).toBe(429);
    expect(view.body).toBe('');
    expect(nameCounts(view)).toEqual({ 'x-ratelimit-limit': 1, 'x-ratelimit-remaining': 1, 'x-ratelimit-reset': 1 });
    expect(view.headers[0]).toEqual(['x-ratelimit-limit', '3, 3;w=60']);
    expect(Number(view.headers[2]![1])).toBeLessThanOrEqual(60);
  });

  it("AI Gateway's token limits admit what envoyproxy/ratelimit admits: every token charged, past the limit and beside a refusal", async () => {
    ads.push('v2', [...egResources(), { config: aiGatewayConfig() as unknown as Record<string, unknown> }]);
    const envoy = rls(true);
    // Until v2 is applied the domain is unknown, and an unknown domain is answered OK with no limit: wait for
    // the limit itself.
    await within(
      10_000,
      () =>
        envoy.call(aiTurn('probe')).then(
          (r) => r.statuses[0]?.current_limit?.requests_per_unit === 1000,
          () => false,
        ),
      'the AI Gateway config applied',
    );
    // Each turn: the request's check, then (when admitted) the stream's 646 tokens, 546 of them output.
    // envoyproxy/ratelimit (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT unset under Envoy Gateway: false) counts
    // every hit: 646, then 1,292 past 1,000, and checks are refused from the third turn.
    const admitted: number[] = [];
    let last: RlsResponse | undefined;
    for (let turn = 1; turn <= 20; turn++) {
      last = await envoy.call(aiTurn('tenant-a'));
      if (last.overall_code !== 'OK') continue;
      admitted.push(turn);
      await envoy.call(aiTurn('tenant-a', [646, 546]));
    }
    expect(admitted).toEqual([1, 2]);
    // The output tokens of the charge that took the total past its limit are counted too (100,000 − 1,092).
    expect(last!.statuses.map((s) => [s.code, s.limit_remaining])).toEqual([
      ['OVER_LIMIT', 0],
      ['OK', 98_908],
    ]);
    expect(clientView(last!).headers.find(([n]) => n === 'x-ratelimit-remaining')?.[1]).toBe('0');
  });

  it('/metrics on PROMETHEUS_ADDR (and nothing else there)', async () => {
    const res = await fetch(`http://127.0.0.1:${ports.prometheus}/metrics`);
    expect(res.status).toBe(200);
    const series = parseMetrics(await res.text());
    expect(metric(series, 'tollgate_requests_total', { domain: LISTENER_DOMAIN, result: 'over_limit' })).toBeGreaterThanOrEqual(2);
    expect(metric(series, 'tollgate_unchecked_total', { reason: 'no_config' })).toBeGreaterThanOrEqual(1);
    for (const path of ['/json', '/explain', '/admin/tiers', '/healthcheck'])
      expect((await fetch(`http://127.0.0.1:${ports.prometheus}${path}`)).status, path).toBe(404);
  });

  it('tollgate explain --url shows which generated rule a request matched', async () => {
    const r = await runCli(['explain', '--url', `http://127.0.0.1:${ports.http}`, SHARED_DOMAIN, ...sharedPairs('10.9.9.9')], env);
    expect(r.stderr).toBe('');
    expect(r.stdout).toContain(`domain ${SHARED_DOMAIN}`);
    expect(r.stdout).toMatch(/100 per hour/);
    const hint = await runCli(['explain', LISTENER_DOMAIN, 'k=v'], env);
    expect([hint.code, hint.stderr]).toEqual([
      2,
      expect.stringMatching(/^tollgate: the config comes from the xDS server here .* --url http:\/\/127\.0\.0\.1:\d+ /),
    ]);
  });

  it('logs: JSON lines with "level":"info", one line naming every setting of the manifest not acted on, nothing raw on stderr', async () => {
    const lines = daemon
      .output()
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(new Set(lines.map((l) => l.level))).toEqual(new Set(['info', 'warn']));
    const notes = lines.filter((l) => String(l.msg).startsWith('envoyproxy/ratelimit settings'));
    expect(notes).toHaveLength(1);
    expect(notes[0]).toMatchObject({
      level: 'warn',
      // This variant of the manifest sets USE_STATSD=true (the default one, false: not needed).
      settings: ['PROMETHEUS_MAPPER_YAML', 'USE_STATSD'],
      unneeded: ['RUNTIME_IGNOREDOTFILES', 'RUNTIME_ROOT', 'RUNTIME_SUBDIRECTORY', 'RUNTIME_WATCH_ROOT'],
    });
    expect(daemon.output()).not.toMatch(/DeprecationWarning|redis_auth_password/);
  });
});

describe('the same manifest with LIMIT_RESPONSE_HEADERS_ENABLED=true and LIMIT_REQUEST_HEADERS_ENABLED=true', () => {
  it("envoyproxy/ratelimit's RateLimit-* headers on every answer, beside Envoy's own, each once; still no body; the upstream's too", async () => {
    const t = await startTestService({
      args: ['--grpc-port', '0', '--http-port', '0', '--grpc-host', '127.0.0.1', '--http-host', '127.0.0.1'],
      env: { ...env, LIMIT_RESPONSE_HEADERS_ENABLED: 'true', LIMIT_REQUEST_HEADERS_ENABLED: 'true', PROMETHEUS_ADDR: '127.0.0.1:0' },
    });
    try {
      const envoy = rls(true, t.service.grpcPort);
      await within(
        10_000,
        () =>
          envoy.call(userRequest('probe')).then(
            () => true,
            () => false,
          ),
        'config applied',
      );
      const answers = await times(envoy, userRequest('h-1'), 4);
      expect(answers[0]!.response_headers_to_add.map(({ key, value }) => ({ key, value }))).toEqual([
        { key: 'RateLimit-Limit', value: '3' },
        { key: 'RateLimit-Remaining', value: '2' },
        { key: 'RateLimit-Reset', value: expect.stringMatching(/^\d+$/) },
      ]);
      // The same three for the upstream (envoyproxy/ratelimit PR #1168), over the wire.
      expect(answers[0]!.request_headers_to_add.map(({ key, value }) => ({ key, value }))).toEqual(
        answers[0]!.response_headers_to_add.map(({ key, value }) => ({ key, value })),
      );
      expect(answers[3]!.overall_code).toBe('OVER_LIMIT');
      expect(answers[3]!.raw_body.length).toBe(0);
      expect(nameCounts(clientView(answers[3]!))).toEqual({
        'ratelimit-limit': 1,
        'ratelimit-remaining': 1,
        'ratelimit-reset': 1,
        'x-ratelimit-limit': 1,
        'x-ratelimit-remaining': 1,
        'x-ratelimit-reset': 1,
      });
    } finally {
      await t.close();
    }
  });
});

function sharedPairs(ip: string): string[] {
  return sharedRequest(ip).descriptors[0]!.entries.map((e) => `${e.key}=${e.value}`);
}
