import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { type Daemon, freePort, startCli } from '../helpers/process.js';
import { property, RlsClient } from '../helpers/service.js';
import { within } from '../helpers/time.js';

// A deployment of envoyproxy/ratelimit, its environment unchanged, started as Tollgate.
describe("serve with envoyproxy/ratelimit's environment", () => {
  let daemon: Daemon | undefined;
  afterEach(() => daemon?.child.kill('SIGKILL'));

  it('loads RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config, logs one line naming what it ignores, and names an unreachable Redis by host:port only', async () => {
    const root = mkdtempSync(join(tmpdir(), 'tollgate-runtime-'));
    mkdirSync(join(root, 'ratelimit', 'config'), { recursive: true });
    // Another domain than ./config's, so the test tells which directory was loaded.
    writeFileSync(
      join(root, 'ratelimit', 'config', 'migrated.yaml'),
      readFileSync('config/property-api.yaml', 'utf8').replace('domain: property-api', 'domain: migrated'),
    );
    const [grpcPort, redisPort] = [await freePort(), await freePort()];
    daemon = await startCli(['serve'], /tollgate serving/, {
      RUNTIME_ROOT: root,
      RUNTIME_SUBDIRECTORY: 'ratelimit',
      GRPC_PORT: String(grpcPort),
      PORT: '0',
      GRPC_HOST: '127.0.0.1',
      HOST: '127.0.0.1',
      BACKEND_TYPE: 'REDIS',
      REDIS_SOCKET_TYPE: 'tcp',
      REDIS_URL: `127.0.0.1:${redisPort}`,
      REDIS_AUTH: 'hunter2-secret',
      REDIS_FAILURE_POLICY: 'local',
      LOG_LEVEL: 'INFO',
      LOG_FORMAT: 'json',
      USE_STATSD: 'true',
      STATSD_HOST: 'statsd',
    });
    const rls = new RlsClient(grpcPort);
    const res = await rls.call({ ...property('read', 'Bearer migrated'), domain: 'migrated' });
    rls.close();
    expect(res.overall_code).toBe('OK');
    // Every line read below is whole (the output arrives in chunks).
    await within(5000, () => daemon!.output().endsWith('\n') && daemon!.output().includes('redis not reachable'));
    const lines = daemon
      .output()
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { msg: string; [k: string]: unknown });
    const ignored = lines.filter((l) => l.msg.startsWith('envoyproxy/ratelimit settings Tollgate does not support'));
    expect(ignored).toHaveLength(1);
    expect(ignored[0]!.msg).toBe('envoyproxy/ratelimit settings Tollgate does not support are ignored: STATSD_HOST, USE_STATSD');
    const unreachable = lines.find((l) => l.msg.startsWith('redis not reachable'));
    expect(unreachable?.msg).toContain(`127.0.0.1:${redisPort}`);
    expect(lines.find((l) => l.msg === 'tollgate serving')).toMatchObject({ domains: ['migrated'] });
    expect(daemon.output()).not.toContain('hunter2');
    expect(daemon.output()).not.toContain('redis store recovered');
  });
});
