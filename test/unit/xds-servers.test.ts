import { describe, expect, it } from 'vitest';
import type { CompiledConfig, CompiledDomain } from '../../src/config/compiled.js';
import { DomainOwners } from '../../src/config/domain-owners.js';
import { pendingConfig } from '../../src/config/load.js';
import { parseServeArgs } from '../../src/settings/settings.js';

// Several xDS servers in one service (issue 63, item 3): how they are named, and who owns a domain.

const servers = (env: NodeJS.ProcessEnv, args: string[] = []) => parseServeArgs(args, { CONFIG_TYPE: 'GRPC_XDS_SOTW', ...env });

describe('CONFIG_GRPC_XDS_SERVER_URL and CONFIG_GRPC_XDS_NODE_ID, paired by position', () => {
  it('one server stays exactly as before', () => {
    const s = servers({ CONFIG_GRPC_XDS_SERVER_URL: 'eg:18001', CONFIG_GRPC_XDS_NODE_ID: 'envoy-ratelimit' });
    expect(s.xdsServers.map((x) => [x.target, x.node.id])).toEqual([['eg:18001', 'envoy-ratelimit']]);
    expect([s.fromDir, s.responses.source]).toEqual([false, 'xds']);
  });

  it('comma-separated, or flags given more than once; one node ID serves every server', () => {
    const env = { CONFIG_GRPC_XDS_SERVER_URL: 'eg:18001, ai-gateway-controller:18002', CONFIG_GRPC_XDS_NODE_ID: 'envoy-ratelimit,envoy-ai-gateway-ratelimit' };
    expect(servers(env).xdsServers.map((x) => [x.target, x.node.id])).toEqual([
      ['eg:18001', 'envoy-ratelimit'],
      ['ai-gateway-controller:18002', 'envoy-ai-gateway-ratelimit'],
    ]);
    const flags = servers({}, ['--xds-server-url', 'a:1', '--xds-server-url', 'b:2', '--xds-node-id', 'n']);
    expect(flags.xdsServers.map((x) => [x.target, x.node.id])).toEqual([
      ['a:1', 'n'],
      ['b:2', 'n'],
    ]);
  });

  it('TLS is chosen per server: Envoy Gateway wants mTLS, AI Gateway serves plaintext', () => {
    const env = { CONFIG_GRPC_XDS_SERVER_URL: 'eg:18001,ai:18002', CONFIG_GRPC_XDS_NODE_ID: 'a,b', CONFIG_GRPC_XDS_SERVER_USE_TLS: 'true,false' };
    const secure = (x: { credentials: unknown }) => (x.credentials as { _isSecure(): boolean })._isSecure();
    expect(servers(env).xdsServers.map(secure)).toEqual([true, false]);
    expect(servers({ ...env, CONFIG_GRPC_XDS_SERVER_USE_TLS: 'true' }).xdsServers.map(secure)).toEqual([true, true]);
    expect(() => servers({ ...env, CONFIG_GRPC_XDS_SERVER_USE_TLS: 'true,false,true' })).toThrow(/2 servers need 2 TLS choices/);
  });

  it('one server takes its node ID whole, comma and all, as before lists', () => {
    expect(servers({ CONFIG_GRPC_XDS_SERVER_URL: 'eg:1', CONFIG_GRPC_XDS_NODE_ID: 'a,b' }).xdsServers.map((x) => x.node.id)).toEqual(['a,b']);
  });

  it('with a directory beside xDS, only domains from xDS count past the limit by default (envoyproxy/ratelimit)', () => {
    const mixed = servers({ CONFIG_TYPE: 'GRPC_XDS_SOTW,FILE' });
    expect([mixed.countPastLimit, mixed.xdsCountPastLimit]).toEqual([false, true]);
    const told = servers({ CONFIG_TYPE: 'GRPC_XDS_SOTW,FILE', STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: 'true' });
    expect([told.countPastLimit, told.xdsCountPastLimit]).toEqual([false, false]);
    expect(servers({}).countPastLimit).toBe(true);
  });

  it('XDS_OVERLAY_FILE needs configs from xDS', () => {
    expect(servers({ XDS_OVERLAY_FILE: '/o.yaml' }).xdsOverlay).toBe('/o.yaml');
    expect(() => parseServeArgs([], { XDS_OVERLAY_FILE: '/o.yaml' })).toThrow(
      /XDS_OVERLAY_FILE sets keys on rules from xDS: it needs --config-type grpc_xds_sotw/,
    );
  });

  it('refuses counts that do not pair, empty entries, the same pair twice and too many servers', () => {
    expect(() => servers({ CONFIG_GRPC_XDS_SERVER_URL: 'a:1,b:2,c:3', CONFIG_GRPC_XDS_NODE_ID: 'x,y' })).toThrow(
      /paired by position: 3 servers need 3 node IDs/,
    );
    expect(() => servers({ CONFIG_GRPC_XDS_SERVER_URL: 'a:1,,b:2' })).toThrow(/CONFIG_GRPC_XDS_SERVER_URL has an empty entry/);
    expect(() => servers({ CONFIG_GRPC_XDS_SERVER_URL: 'a:1,a:1' })).toThrow(/the same server and node twice/);
    expect(() => servers({ CONFIG_GRPC_XDS_SERVER_URL: Array.from({ length: 9 }, (_, i) => `h:${i + 1}`).join(',') })).toThrow(/9 servers, more than 8/);
  });

  it('CONFIG_TYPE=GRPC_XDS_SOTW,FILE reads the directory too, and answers each domain as its source says', () => {
    const s = servers({ CONFIG_TYPE: 'GRPC_XDS_SOTW,FILE' });
    expect([s.fromDir, s.xdsServers.length, s.responses.source]).toEqual([true, 1, 'file']);
    expect(() => servers({ CONFIG_TYPE: 'GRPC_XDS_SOTW,MEMCACHE' })).toThrow(/CONFIG_TYPE must be file or grpc_xds_sotw/);
  });
});

const domain = (name: string, file: string): CompiledDomain => ({ name, file }) as unknown as CompiledDomain;
const config = (hash: string, ...names: [string, string][]): CompiledConfig => ({ hash, domains: new Map(names.map(([n, f]) => [n, domain(n, f)])) });

describe('DomainOwners', () => {
  const sources = [
    { label: 'config directory', kind: 'dir' as const },
    { label: 'eg', kind: 'xds' as const },
    { label: 'ai', kind: 'xds' as const },
  ];

  it('a domain two sources send is served from the one listed first; the other is refused until it drops it', () => {
    const owners = new DomainOwners(sources);
    owners.set(0, config('d1', ['own', 'dir']));
    const first = owners.set(1, config('e1', ['shared', 'eg'], ['eg-only', 'eg']));
    expect(first.config.pending).toBe(true); // ai has sent nothing yet
    const claim = owners.set(2, config('a1', ['shared', 'ai'], ['ai-only', 'ai']));
    expect(claim.refused).toEqual([{ domain: 'shared', owner: 'eg' }]);
    expect(claim.config.pending).toBeUndefined();
    expect(claim.config.domains.get('shared')!.file).toBe('eg');
    expect([...claim.config.domains.keys()].sort()).toEqual(['ai-only', 'eg-only', 'own', 'shared']);
    // The owner sends again with the domain: nothing refused for it, and the claim stays refused.
    const again = owners.set(1, config('e2', ['shared', 'eg2']));
    expect(again.refused).toEqual([]);
    const dropped = owners.set(1, config('e3', ['eg-only', 'eg3']));
    expect(dropped.moved).toEqual([{ domain: 'shared', to: 'ai' }]);
    expect(dropped.config.domains.get('shared')!.file).toBe('ai');
    expect(dropped.config.domains.get('shared')!.fromXds).toBe(true);
    expect(dropped.config.domains.get('own')!.fromXds).toBeUndefined();
    expect(dropped.previousHash).toBe(again.config.hash); // the union's, not the source's own
  });

  it('whichever arrives first, every replica serves the same owner under the same hash', () => {
    const run = (order: number[]) => {
      const owners = new DomainOwners(sources.slice(1));
      const configs = [config('e', ['shared', 'eg']), config('a', ['shared', 'ai'])];
      let last = owners.set(order[0]!, configs[order[0]!]!);
      last = owners.set(order[1]!, configs[order[1]!]!);
      return { file: last.config.domains.get('shared')!.file, hash: last.config.hash };
    };
    expect(run([1, 0])).toEqual(run([0, 1]));
    expect(run([1, 0]).file).toBe('eg');
  });

  it('one source is exactly itself: its hash, its pending state', () => {
    const owners = new DomainOwners([sources[1]!]);
    expect(owners.set(0, pendingConfig()).config).toMatchObject({ hash: 'none', pending: true });
    expect(owners.set(0, config('abc', ['x', 'f'])).config.hash).toBe('abc');
    const two = new DomainOwners(sources.slice(1));
    two.set(0, config('abc', ['x', 'f']));
    expect(two.set(1, config('def')).config.hash).toMatch(/^[0-9a-f]{12}$/);
  });
});
