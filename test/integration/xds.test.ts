import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { AdsServer, encodeConfig, type Resource, RLC_TYPE } from '../helpers/ads-server.js';
import { jsonOf } from '../helpers/json.js';
import { metric, scrape } from '../helpers/metrics.js';
import { freePort } from '../helpers/process.js';
import { capturingLogger, healthClient, type RlsRequest, startTestService, type TestService } from '../helpers/service.js';
import { within } from '../helpers/time.js';
import { makeCertificates } from '../helpers/tls.js';

// CONFIG_TYPE=GRPC_XDS_SOTW against a real ADS server (Envoy's discovery protos, test/helpers/ads-server.ts):
// the xDS protocol's version and nonce rules, and a config that keeps deciding whatever the server does.

const limit = (perMinute: number, unit = 'MINUTE'): Resource => ({
  config: { name: 'api', domain: 'xds', descriptors: [{ key: 'client', rate_limit: { unit, requests_per_unit: perMinute, name: 'per-client' } }] },
});
const req = (client: string, hits = 1): RlsRequest => ({
  domain: 'xds',
  descriptors: [{ entries: [{ key: 'client', value: client }], ...(hits === 1 ? {} : { hits_addend: { value: hits } }) }],
});
/** The limit in force for the probe client; 'no config' while the service has none yet (it answers UNAVAILABLE). */
const limitNow = async (t: TestService): Promise<number | undefined | 'no config'> => {
  try {
    return (await t.rls.call(req('probe', 0))).statuses[0]?.current_limit?.requests_per_unit;
  } catch (err) {
    if ((err as grpc.ServiceError).code === grpc.status.UNAVAILABLE) return 'no config';
    throw err;
  }
};
const noConfigYet = { code: grpc.status.UNAVAILABLE, details: 'no rate limit configuration loaded yet: waiting for the first from the xDS server' };
const admitted = async (t: TestService, client: string, n: number): Promise<number> => {
  let ok = 0;
  for (let i = 0; i < n; i++) if ((await t.rls.call(req(client))).overall_code === 'OK') ok++;
  return ok;
};
const readyz = async (t: TestService): Promise<number> => (await fetch(`http://127.0.0.1:${t.service.httpPort}/readyz`)).status;
const grpcHealth = (t: TestService): Promise<number> => {
  const client = healthClient(t.service.grpcPort);
  return new Promise<number>((resolve, reject) =>
    client.Check({ service: 'envoy.service.ratelimit.v3.RateLimitService' }, (err: Error | null, r: { status: number }) =>
      err ? reject(err) : resolve(r.status),
    ),
  ).finally(() => client.close());
};
const xdsArgs = (port: number, ...more: string[]): string[] => [
  '--config-type',
  'GRPC_XDS_SOTW',
  '--xds-server-url',
  `127.0.0.1:${port}`,
  '--xds-backoff-initial',
  '100ms',
  '--xds-backoff-max',
  '400ms',
  '--xds-connect-retry-interval',
  '100ms',
  ...more,
];

// One service and one management server per test, whichever describe it is in.
let t: TestService | undefined;
let ads: AdsServer | undefined;
afterEach(async () => {
  await t?.close();
  ads?.stop();
  t = ads = undefined;
});

describe('descriptor configs from an xDS management server (ADS, state of the world)', () => {
  it('first config: not ready until it arrives; subscribes as envoyproxy/ratelimit does; ACKs with version and nonce', async () => {
    ads = new AdsServer();
    const port = await ads.start();
    t = await startTestService({
      args: xdsArgs(port, '--xds-node-id', 'rls-node', '--xds-node-metadata', 'cluster=eg,zone=a=b,skipped'),
      env: { CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS: 'x-auth:secret-1,x-team:rl' },
    });
    await within(5000, () => ads!.received.length >= 1, 'first request');
    expect(await readyz(t)).toBe(503);
    expect(await grpcHealth(t)).toBe(2); // NOT_SERVING
    expect((await fetch(`http://127.0.0.1:${t.service.httpPort}/healthcheck`)).status).toBe(500); // Envoy Gateway's probe
    // No config yet: an error, as envoyproxy/ratelimit answers, so Envoy's failure mode decides (not "admit all").
    await expect(t.rls.call(req('early'))).rejects.toMatchObject(noConfigYet);
    expect(metric((await scrape(t.service.httpPort)).series, 'tollgate_unchecked_total', { reason: 'no_config' })).toBe(1);
    const first = ads.received[0]!;
    expect(first.request).toMatchObject({ version_info: '', resource_names: [], type_url: RLC_TYPE, response_nonce: '', error_detail: null });
    expect(first.request.node).toMatchObject({ id: 'rls-node', user_agent_name: 'tollgate' });
    expect(first.request.node!.metadata!.fields).toEqual({
      cluster: { stringValue: 'eg', kind: 'stringValue' },
      zone: { stringValue: 'a=b', kind: 'stringValue' },
    });
    expect(first.metadata).toMatchObject({ 'x-auth': 'secret-1', 'x-team': 'rl' });

    ads.push('v1', [limit(3)]);
    await within(5000, async () => (await readyz(t!)) === 200, 'ready after the first config');
    expect(await grpcHealth(t)).toBe(1); // SERVING
    const probe = await fetch(`http://127.0.0.1:${t.service.httpPort}/healthcheck`);
    expect([probe.status, await probe.text()]).toEqual([200, 'OK']);
    expect(await admitted(t, 'a', 5)).toBe(3);
    const ack = ads.requests(1)[1]!;
    expect(ack).toMatchObject({ version_info: 'v1', response_nonce: '1', error_detail: null, node: null });
    const { series } = await scrape(t.service.httpPort);
    expect(metric(series, 'tollgate_xds_responses_total', { result: 'applied' })).toBe(1);
    expect(metric(series, 'tollgate_xds_connected')).toBe(1);
  });

  it('an update applies as a hot reload (counters kept); an invalid one is NACKed with why, and the last good stays', async () => {
    ads = new AdsServer();
    const port = await ads.start();
    const log = capturingLogger();
    t = await startTestService({ args: xdsArgs(port), logger: log.logger });
    ads.push('v1', [limit(3)]);
    await within(5000, async () => (await limitNow(t!)) === 3, 'v1 applied');
    expect(await admitted(t, 'kept', 2)).toBe(2);

    ads.push('v2', [limit(4)]);
    await within(5000, async () => (await limitNow(t!)) === 4, 'v2 applied');
    expect(await admitted(t, 'kept', 5)).toBe(2); // 2 counted under v1: 2 more fit under 4
    expect(
      log
        .lines()
        .filter((l) => l.msg === 'config reloaded')
        .at(-1),
    ).toMatchObject({ changed: ['xds/client'], added: [], removed: [] });

    ads.push('v3', [{ config: { name: 'api', domain: 'xds', descriptors: [{ key: 'client', rate_limit: { unit: 'UNKNOWN', requests_per_unit: 9 } }] } }]);
    await within(5000, () => ads!.requests().some((r) => r.error_detail !== null), 'NACK');
    const nack = ads.requests().find((r) => r.error_detail !== null)!;
    expect(nack).toMatchObject({ version_info: 'v2', response_nonce: '3', type_url: RLC_TYPE });
    expect(nack.error_detail!.code).toBe(grpc.status.INTERNAL);
    expect(nack.error_detail!.message).toMatch(/^xDS resource #0 "api": descriptors\[0\]\.rate_limit\.unit: /);
    expect(await limitNow(t)).toBe(4);
    const { series } = await scrape(t.service.httpPort);
    expect(metric(series, 'tollgate_xds_responses_total', { result: 'nacked' })).toBe(1);
    expect(metric(series, 'tollgate_config_reloads_total', { result: 'failure' })).toBe(1);
    expect(log.lines().find((l) => l.msg === 'config reload rejected: keeping the last good config')).toMatchObject({ keeping: expect.any(String) });
  });

  it('server gone: decisions go on under the last config; server back: reconnects saying which version it has', async () => {
    ads = new AdsServer();
    const port = await ads.start();
    t = await startTestService({ args: xdsArgs(port) });
    ads.push('v7', [limit(2)]);
    await within(5000, async () => (await limitNow(t!)) === 2, 'v7 applied');
    ads.stop();
    await within(5000, async () => metric((await scrape(t!.service.httpPort)).series, 'tollgate_xds_connected') === 0, 'disconnected');
    expect(await admitted(t, 'during', 3)).toBe(2); // still limited, by v7
    expect(await readyz(t)).toBe(200);

    ads = new AdsServer();
    ads.push('v7', [limit(2)]); // the same snapshot: a go-control-plane server sends nothing to a client that has it
    await ads.start(port);
    await within(10_000, () => ads!.received.length >= 1, 'reconnect');
    expect(ads.received[0]!.request).toMatchObject({ version_info: 'v7', response_nonce: '', node: expect.objectContaining({ id: 'default' }) });
    ads.push('v8', [limit(6)]);
    await within(5000, async () => (await limitNow(t!)) === 6, 'v8 applied after the reconnect');
    const { text } = await scrape(t.service.httpPort);
    expect(text).toMatch(/^tollgate_xds_stream_errors_total\{code="[A-Z_]+"\} [1-9]/m);
  });

  it('FORCE_START_WITHOUT_INITIAL_CONFIG=true: ready with no server at all, and every decision UNAVAILABLE until a config', async () => {
    const port = await freePort();
    t = await startTestService({ args: xdsArgs(port), env: { FORCE_START_WITHOUT_INITIAL_CONFIG: 'true' } });
    expect(await readyz(t)).toBe(200);
    await expect(t.rls.call(req('x'))).rejects.toMatchObject(noConfigYet);
    const json = await fetch(`http://127.0.0.1:${t.service.httpPort}/json`, { method: 'POST', body: JSON.stringify(req('x')) });
    expect([json.status, (await jsonOf(json)).error]).toEqual([503, noConfigYet.details]);
    const explained = await fetch(`http://127.0.0.1:${t.service.httpPort}/explain`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(req('x')),
    });
    expect(explained.status).toBe(503);
  });

  it('a first state of the world that is empty is a config: nothing limited, every request OK', async () => {
    ads = new AdsServer();
    const port = await ads.start();
    t = await startTestService({ args: xdsArgs(port) });
    await within(5000, async () => (await limitNow(t!)) === 'no config', 'asking');
    ads.push('v0', []);
    await within(5000, async () => (await readyz(t!)) === 200, 'ready on an empty config');
    expect(await limitNow(t)).toBeUndefined();
    expect(await admitted(t, 'x', 3)).toBe(3);
  });

  it('an empty state of the world drops every limit: its domains answer OK unlimited, as envoyproxy/ratelimit answers an unknown domain', async () => {
    ads = new AdsServer();
    const port = await ads.start();
    const log = capturingLogger();
    t = await startTestService({ args: xdsArgs(port), logger: log.logger });
    ads.push('v1', [limit(1)]);
    await within(5000, async () => (await limitNow(t!)) === 1, 'v1 applied');
    ads.push('v2', []);
    await within(5000, async () => (await limitNow(t!)) === undefined, 'v2 applied');
    expect(await admitted(t, 'after', 3)).toBe(3);
    expect(log.lines().some((l) => String(l.msg).startsWith('xDS server sent no rate-limit config'))).toBe(true);
  });
});

/** A RateLimitConfig whose descriptors nest `depth` levels, written byte by byte (no encoder would). */
function nestedDescriptors(depth: number): Uint8Array {
  const varint = (n: number): number[] => {
    const out: number[] = [];
    for (; n > 0x7f; n >>>= 7) out.push((n & 0x7f) | 0x80);
    out.push(n);
    return out;
  };
  let inner: number[] = [0x0a, 0x01, 0x6b]; // key: "k"
  for (let i = 1; i < depth; i++) inner = [0x0a, 0x01, 0x6b, 0x22, ...varint(inner.length), ...inner]; // descriptors = 4
  return Uint8Array.from([0x12, 0x03, 0x78, 0x64, 0x73, 0x1a, ...varint(inner.length), ...inner]); // domain "xds", descriptors = 3
}

describe('xDS: bad input from the management server', () => {
  async function started(...more: string[]): Promise<{ t: TestService; ads: AdsServer }> {
    ads = new AdsServer();
    const port = await ads.start();
    t = await startTestService({ args: xdsArgs(port, ...more) });
    ads.push('good', [limit(3)]);
    await within(5000, async () => (await limitNow(t!)) === 3, 'good applied');
    return { t, ads };
  }

  const nackFor = async (server: AdsServer, nonce: string): Promise<string> => {
    await within(5000, () => server.requests().some((r) => r.response_nonce === nonce), `answer to nonce ${nonce}`);
    const answer = server.requests().find((r) => r.response_nonce === nonce)!;
    expect(answer.version_info).toBe('good');
    return answer.error_detail?.message ?? '(ACKed)';
  };

  it('a resource of another type, or one that does not decode: NACKed, naming the resource', async () => {
    const s = await started();
    s.ads.push('bad1', [limit(5), { typeUrl: 'type.googleapis.com/envoy.config.cluster.v3.Cluster', bytes: encodeConfig({ name: 'x' }) }]);
    expect(await nackFor(s.ads, '2')).toMatch(/^xDS resource #1: has type "type.googleapis.com\/envoy.config.cluster.v3.Cluster", not /);
    s.ads.push('bad2', [{ bytes: Uint8Array.from([0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f]) }]);
    expect(await nackFor(s.ads, '3')).toMatch(/^xDS resource #0: is not a RateLimitConfig message/);
    expect(await limitNow(s.t)).toBe(3);
  });

  it('a response of a type not asked for is ignored (neither ACK nor NACK), and counted', async () => {
    const s = await started();
    s.ads.push('other', [limit(9)], 'type.googleapis.com/envoy.config.listener.v3.Listener');
    await within(5000, async () => metric((await scrape(s.t.service.httpPort)).series, 'tollgate_xds_responses_total', { result: 'refused' }) === 1, 'refused');
    expect(s.ads.requests().some((r) => r.response_nonce === '2')).toBe(false);
    expect(await limitNow(s.t)).toBe(3);
  });

  it('descriptors nested past any request, and a resource over --max-config-bytes: NACKed with the bound', async () => {
    const s = await started('--max-config-bytes', '20000');
    let deep: Record<string, unknown> = { key: 'leaf', rate_limit: { unit: 'SECOND', requests_per_unit: 1 } };
    for (let i = 0; i < 80; i++) deep = { key: `k${i}`, descriptors: [deep] };
    s.ads.push('deep', [{ config: { name: 'deep', domain: 'xds', descriptors: [deep] } }]);
    expect(await nackFor(s.ads, '2')).toMatch(/^xDS resource #0 "deep": descriptors nested more than 64 levels deep/);
    // Deeper than protobuf's own recursion limit (100, as protoc's): refused by the decoder, never a stack overflow.
    s.ads.push('deeper', [{ bytes: nestedDescriptors(150) }]);
    expect(await nackFor(s.ads, '3')).toMatch(/^xDS resource #0: is not a RateLimitConfig message \(max depth exceeded\)/);
    const many = Array.from({ length: 1000 }, (_, i) => ({ key: 'client', value: `c${i}`, rate_limit: { unit: 'SECOND', requests_per_unit: 1 } }));
    s.ads.push('big', [{ config: { name: 'big', domain: 'xds', descriptors: many } }]);
    expect(await nackFor(s.ads, '4')).toMatch(/more than the maximum of 20000 per resource \(--max-config-bytes\)/);
    expect(await limitNow(s.t)).toBe(3);
  });

  it('a 100 MB message: refused by the size limit, the stream reopened, the config kept', async () => {
    const s = await started();
    const huge = new Uint8Array(100 * 1024 * 1024);
    s.ads.push('huge', [{ bytes: huge }]);
    await within(
      15_000,
      async () => (metric((await scrape(s.t.service.httpPort)).series, 'tollgate_xds_stream_errors_total', { code: 'RESOURCE_EXHAUSTED' }) ?? 0) >= 1,
      'refused as too large',
    );
    expect(await limitNow(s.t)).toBe(3);
    s.ads.push('after', [limit(7)]);
    await within(10_000, async () => (await limitNow(s.t)) === 7, 'a later config still applies');
  });

  it('a flood of 300 updates: the last one wins, every answer names a nonce that was sent, nothing hangs', async () => {
    const s = await started();
    for (let v = 1; v <= 300; v++) s.ads.push(`f${v}`, [limit(100 + v)]);
    await within(20_000, async () => (await limitNow(s.t)) === 400, 'last update applied');
    await within(5000, () => s.ads.requests().some((r) => r.version_info === 'f300'), 'ACK of the last');
    const answers = s.ads.requests().filter((r) => r.response_nonce !== '');
    expect(answers.every((r) => Number(r.response_nonce) >= 1 && Number(r.response_nonce) <= 301 && r.error_detail === null)).toBe(true);
    expect(answers.at(-1)).toMatchObject({ version_info: 'f300', response_nonce: '301' });
  });
});

describe('xDS over TLS', () => {
  let dir: string;

  beforeAll(() => {
    dir = makeCertificates([
      { name: 'server', san: 'DNS:xds.internal' },
      { name: 'client', san: 'DNS:tollgate' },
    ]).dir;
  }, 30_000);

  const serverTls = (mutual: boolean): grpc.ServerCredentials =>
    grpc.ServerCredentials.createSsl(
      readFileSync(join(dir, 'ca.pem')),
      [{ private_key: readFileSync(join(dir, 'server.key')), cert_chain: readFileSync(join(dir, 'server.pem')) }],
      mutual,
    );
  const tlsEnv = (client: boolean): NodeJS.ProcessEnv => ({
    CONFIG_GRPC_XDS_SERVER_USE_TLS: 'true',
    CONFIG_GRPC_XDS_SERVER_TLS_CACERT: join(dir, 'ca.pem'),
    CONFIG_GRPC_XDS_SERVER_TLS_SAN: 'xds.internal',
    ...(client ? { CONFIG_GRPC_XDS_CLIENT_TLS_CERT: join(dir, 'client.pem'), CONFIG_GRPC_XDS_CLIENT_TLS_KEY: join(dir, 'client.key') } : {}),
  });

  it('mTLS: the server checked against the CA and the SAN, the client by its certificate', async () => {
    ads = new AdsServer();
    ads.push('v1', [limit(2)]);
    const port = await ads.start(0, serverTls(true));
    t = await startTestService({ args: xdsArgs(port), env: tlsEnv(true) });
    await within(10_000, async () => (await limitNow(t!)) === 2, 'config over mTLS');
  });

  it('no client certificate for a server that asks for one, or a SAN the certificate lacks: never connected, never ready', async () => {
    ads = new AdsServer();
    ads.push('v1', [limit(2)]);
    const port = await ads.start(0, serverTls(true));
    t = await startTestService({ args: xdsArgs(port, '--xds-node-id', 'no-cert'), env: tlsEnv(false) });
    const wrongSan = await startTestService({
      args: xdsArgs(port, '--xds-node-id', 'wrong-san'),
      env: { ...tlsEnv(true), CONFIG_GRPC_XDS_SERVER_TLS_SAN: 'someone.else' },
    });
    // The control: started last, configured right, it gets its config; the other two had as long to try.
    const good = await startTestService({ args: xdsArgs(port, '--xds-node-id', 'good'), env: tlsEnv(true) });
    try {
      await within(10_000, async () => (await limitNow(good)) === 2, 'the control gets its config');
      // Only a stream's first request names the node: every stream that got that far was the control's.
      expect(new Set(ads.received.filter((r) => r.request.node !== null).map((r) => r.request.node!.id))).toEqual(new Set(['good']));
      expect(await readyz(t)).toBe(503);
      expect(await readyz(wrongSan)).toBe(503);
      expect(await limitNow(t)).toBe('no config');
    } finally {
      await Promise.all([wrongSan.close(), good.close()]);
    }
  });
});

describe('xDS: a large config pushed under load', () => {
  it('5,000 descriptors pushed while 1,000 decisions a second flow: every decision answered, the longest gap reported', async () => {
    ads = new AdsServer();
    const port = await ads.start();
    t = await startTestService({ args: xdsArgs(port), realClock: true });
    ads.push('small', [limit(1_000_000)]);
    await within(5000, async () => (await limitNow(t!)) === 1_000_000, 'small applied');
    const descriptors = Array.from({ length: 5000 }, (_, i) => ({ key: 'client', value: `c${i}`, rate_limit: { unit: 'HOUR', requests_per_unit: 1000 + i } }));
    descriptors.push({ key: 'client', value: 'probe', rate_limit: { unit: 'HOUR', requests_per_unit: 42 } });

    const answeredAt: number[] = [];
    let failed = 0;
    let sent = 0;
    const tick = setInterval(() => {
      for (let i = 0; i < 10; i++) {
        sent++;
        t!.rls.call(req(`c${sent % 5000}`)).then(
          () => answeredAt.push(performance.now()),
          () => failed++,
        );
      }
    }, 10); // 10 every 10 ms: 1,000 a second
    try {
      await within(2000, () => answeredAt.length >= 500, 'load flowing');
      const pushedAt = performance.now();
      ads.push('large', [{ config: { name: 'large', domain: 'xds', descriptors } }]);
      await within(30_000, async () => (await limitNow(t!)) === 42, 'large applied');
      const appliedMs = performance.now() - pushedAt;
      const until = answeredAt.length + 500;
      await within(5000, () => answeredAt.length >= until, 'load still flowing after');
      clearInterval(tick);
      await within(5000, () => answeredAt.length + failed === sent, 'every call answered');
      expect(failed).toBe(0);
      const during = answeredAt.filter((at) => at >= pushedAt - 100);
      let gap = 0;
      for (let i = 1; i < during.length; i++) gap = Math.max(gap, during[i]! - during[i - 1]!);
      console.info(
        `xDS 5,000-descriptor push under 1,000 decisions/s: applied in ${appliedMs.toFixed(0)} ms, longest gap between answers ${gap.toFixed(1)} ` +
          `ms, ${sent} decisions`,
      );
      expect(ads.requests().at(-1)).toMatchObject({ version_info: 'large', error_detail: null });
    } finally {
      clearInterval(tick);
    }
  }, 60_000);
});
