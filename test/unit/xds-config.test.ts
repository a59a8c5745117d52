import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import protobuf from 'protobufjs';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { ConfigError } from '../../src/config/errors.js';
import { compileSources, configLimits } from '../../src/config/load.js';
import { RLS_CONFIG_TYPE_URL, xdsSources } from '../../src/config/rls-conf.js';
import { parseGoDuration, parsePairs } from '../../src/settings/compat.js';
import { Backoff } from '../../src/xds/backoff.js';
import { encodeConfig } from '../helpers/ads-server.js';

const resource = (config: Record<string, unknown>) => ({ typeUrl: RLS_CONFIG_TYPE_URL, value: encodeConfig(config) });

describe('xDS RateLimitConfig → the YAML envoyproxy/ratelimit makes of it (config_xds.go)', () => {
  it('carries every field of rls_conf.proto', () => {
    const [source] = xdsSources(
      [
        resource({
          name: 'eg-policy',
          domain: 'gw',
          descriptors: [
            {
              key: 'remote_address',
              descriptors: [
                {
                  key: 'path',
                  value: '/a',
                  rate_limit: { unit: 'WEEK', requests_per_unit: 7, name: 'weekly' },
                  shadow_mode: true,
                  detailed_metric: true,
                  quota_mode: true,
                },
                {
                  key: 'path',
                  value: '/b',
                  rate_limit: { unlimited: true, replaces: [{ name: 'weekly' }] },
                  metadata: {
                    fields: {
                      team: { stringValue: 'web' },
                      n: { numberValue: 2 },
                      on: { boolValue: true },
                      tags: { listValue: { values: [{ stringValue: 'x' }] } },
                      nested: { structValue: { fields: { z: { nullValue: 0 } } } },
                    },
                  },
                },
              ],
            },
          ],
        }),
      ],
      configLimits(),
    );
    expect(source!.file).toBe('xDS resource #0 "eg-policy"');
    expect(parse(source!.text)).toEqual({
      domain: 'gw',
      descriptors: [
        {
          key: 'remote_address',
          descriptors: [
            {
              key: 'path',
              value: '/a',
              rate_limit: { unit: 'WEEK', requests_per_unit: 7, name: 'weekly' },
              shadow_mode: true,
              detailed_metric: true,
              quota_mode: true,
            },
            {
              key: 'path',
              value: '/b',
              rate_limit: { unlimited: true, replaces: [{ name: 'weekly' }] },
              metadata: { team: 'web', n: 2, on: true, tags: ['x'], nested: { z: null } },
            },
          ],
        },
      ],
    });
    // And it loads: the same validation and compile as a file.
    const config = compileSources([source!]);
    expect([...config.domains.get('gw')!.rules].map((r) => r.id).sort()).toEqual(['remote_address.path_/a', 'remote_address.path_/b'].sort());
  });

  it('values that YAML would read as something else stay strings', () => {
    const [source] = xdsSources(
      [
        resource({
          domain: 'd',
          descriptors: [{ key: 'k', value: '123', descriptors: [{ key: 'yes', value: 'null', rate_limit: { unit: 'SECOND', requests_per_unit: 1 } }] }],
        }),
      ],
      configLimits(),
    );
    expect(parse(source!.text).descriptors[0]).toMatchObject({ value: '123', descriptors: [{ key: 'yes', value: 'null' }] });
  });

  it('every bad resource is reported at once, by index and name', () => {
    let err: unknown;
    try {
      xdsSources(
        [
          { typeUrl: 'type.googleapis.com/other.Type\u0007', value: new Uint8Array() },
          { typeUrl: RLS_CONFIG_TYPE_URL, value: Uint8Array.from([0x1a, 0x05, 0x0a]) },
          resource({ name: 'fine', domain: 'ok' }),
        ],
        configLimits(),
      );
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(ConfigError);
    const problems = (err as ConfigError).problems;
    expect(problems.map((p) => [p.file, p.code])).toEqual([
      ['xDS resource #0', 'WRONG_TYPE'],
      ['xDS resource #1', 'UNDECODABLE'],
    ]);
    expect(problems[0]!.message).toContain('"type.googleapis.com/other.Type?"'); // control characters never reach a log line
  });
});

describe("the proto subsets Tollgate ships match Envoy's own", () => {
  const require = createRequire(import.meta.url);
  const deps = join(dirname(require.resolve('@grpc/grpc-js-xds/package.json')), 'deps');
  const ours = fileURLToPath(new URL('../../proto', import.meta.url));
  const load = (roots: string[], file: string): protobuf.Root => {
    const root = new protobuf.Root();
    root.resolvePath = (_o, target) => {
      const found = roots.map((r) => join(r, target)).find((p) => existsSync(p));
      return found ?? target; // google/protobuf/*: protobufjs's own
    };
    root.loadSync(file, { keepCase: true });
    return root;
  };
  const envoyRoots = [
    ...['envoy-api', 'xds', 'googleapis', 'protoc-gen-validate'].map((d) => join(deps, d)),
    dirname(require.resolve('protobufjs/package.json')),
  ];
  const envoy = load(envoyRoots, 'envoy/service/discovery/v3/ads.proto');
  const mine = load([ours], 'envoy/service/discovery/v3/ads.proto');

  for (const name of [
    'envoy.service.discovery.v3.DiscoveryRequest',
    'envoy.service.discovery.v3.DiscoveryResponse',
    'envoy.config.core.v3.Node',
    'google.rpc.Status',
  ]) {
    it(`${name}: every field we have, with Envoy's number and type`, () => {
      const a = mine.lookupType(name);
      const b = envoy.lookupType(name);
      for (const f of a.fieldsArray) {
        const theirs = b.fields[f.name];
        expect(theirs, `${name}.${f.name}`).toBeDefined();
        expect([f.id, f.type, f.repeated]).toEqual([theirs!.id, theirs!.type, theirs!.repeated]);
      }
    });
  }

  it("the service and method names are Envoy's", () => {
    const a = mine.lookupService('envoy.service.discovery.v3.AggregatedDiscoveryService').methods.StreamAggregatedResources!;
    const b = envoy.lookupService('envoy.service.discovery.v3.AggregatedDiscoveryService').methods.StreamAggregatedResources!;
    expect([a.requestType, a.responseType, a.requestStream, a.responseStream]).toEqual([b.requestType, b.responseType, b.requestStream, b.responseStream]);
  });
});

describe('xDS settings as envoyproxy/ratelimit writes them', () => {
  it('Go durations', () => {
    expect(['3s', '500ms', '1m30s', '1h', '0', '1.5s', '10', '250us'].map(parseGoDuration)).toEqual([3000, 500, 90_000, 3_600_000, 0, 1500, 10_000, 0.25]);
    expect(['', 's', '3x', '-1s', '3s junk'].map(parseGoDuration)).toEqual([undefined, undefined, undefined, undefined, undefined]);
  });

  it('k=v and k:v lists: entries without the separator skipped, the value may hold it', () => {
    expect(parsePairs('a=1,b=x=y,skipped,=no', '=')).toEqual({ a: '1', b: 'x=y' });
    expect(parsePairs('authorization:Bearer a:b,x-team:rl', ':')).toEqual({ authorization: 'Bearer a:b', 'x-team': 'rl' });
  });

  it('backoff: initial × factor^attempt, jittered between initial and that, capped; reset starts over', () => {
    const b = new Backoff({ initialMs: 100, maxMs: 1000, factor: 2, jitter: false });
    expect([b.next(), b.next(), b.next(), b.next(), b.next()]).toEqual([100, 200, 400, 800, 1000]);
    b.reset();
    expect(b.next()).toBe(100);
    // envoyproxy/ratelimit's default factor 0.5 never grows: initial every time.
    const flat = new Backoff({ initialMs: 100, maxMs: 1000, factor: 0.5, jitter: true }, () => 0.9);
    expect([flat.next(), flat.next(), flat.next()]).toEqual([100, 100, 100]);
    const jittered = new Backoff({ initialMs: 100, maxMs: 1000, factor: 2, jitter: true }, () => 0.5);
    expect([jittered.next(), jittered.next(), jittered.next()]).toEqual([100, 150, 250]);
  });
});
