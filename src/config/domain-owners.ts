import { createHash } from 'node:crypto';
import type { CompiledConfig, CompiledDomain } from './compiled.js';

/** One service, several config sources (the config directory, xDS management servers): each source owns
 * the domains it sends, and the running config is the union of what each owns. A domain two sources send is
 * owned by the one listed first (the directory, then the servers in the order the settings name them), and
 * refused from the other (its other domains apply): by the order of the list, never of arrival, so every
 * replica and every restart serves the same owner's copy, and the union's hash (of the sources' hashes, in
 * that order) names what is served. A source that goes quiet keeps its domains: only what it sends changes
 * them. Until every source has sent its first config, the union is marked pending, so a request for a domain
 * nobody has sent yet is answered as before any config (limiter.ts), not admitted as unknown. */

export interface SourceName {
  /** How logs name it: the server and node ID, or "config directory"; never a request's text. */
  label: string;
  kind: 'xds' | 'dir';
}

export interface Composed {
  config: CompiledConfig;
  /** Domains this delivery claimed that another source owns: refused, kept as they were. */
  refused: { domain: string; owner: string }[];
  /** Domains that changed hands: their owner dropped them, or a source listed before it sent them. */
  moved: { domain: string; to: string }[];
  /** The union's hash before this change. */
  previousHash: string;
}

export class DomainOwners {
  private readonly configs: (CompiledConfig | undefined)[];
  private readonly owner = new Map<string, number>();
  private hash = 'none';

  constructor(private readonly sources: readonly SourceName[]) {
    this.configs = sources.map(() => undefined);
  }

  get size(): number {
    return this.sources.length;
  }

  /** Every source has sent a config. */
  allDelivered(): boolean {
    return this.configs.every((c) => c !== undefined && !c.pending);
  }

  /** Source `index` now holds `config` (its whole set): the union to run, and what was refused or moved. */
  set(index: number, config: CompiledConfig): Composed {
    this.configs[index] = this.sources[index]!.kind === 'xds' ? markedXds(config) : config;
    const before = new Map(this.owner);
    this.owner.clear();
    this.configs.forEach((c, i) => {
      for (const name of c?.domains.keys() ?? []) if (!this.owner.has(name)) this.owner.set(name, i);
    });
    const moved: Composed['moved'] = [];
    for (const [name, i] of this.owner) {
      const was = before.get(name);
      if (was !== undefined && was !== i) moved.push({ domain: name, to: this.sources[i]!.label });
    }
    const refused: Composed['refused'] = [];
    for (const name of this.configs[index]!.domains.keys()) {
      const owner = this.owner.get(name)!;
      if (owner !== index) refused.push({ domain: name, owner: this.sources[owner]!.label });
    }
    const previousHash = this.hash;
    const union = this.union();
    this.hash = union.hash;
    return { config: union, refused, moved, previousHash };
  }

  private union(): CompiledConfig {
    const domains = new Map<string, CompiledDomain>();
    for (const [name, i] of this.owner) domains.set(name, this.configs[i]!.domains.get(name)!);
    const pending = this.configs.some((c) => c === undefined || c.pending);
    const hashes = this.configs.map((c) => c?.hash ?? 'none');
    // One source is exactly itself: its hash, as before sources could be combined.
    const hash = hashes.length === 1 ? hashes[0]! : createHash('sha256').update(hashes.join('\n')).digest('hex').slice(0, 12);
    return pending ? { domains, hash, pending: true } : { domains, hash };
  }
}

/** A domain from xDS answers as envoyproxy/ratelimit's would (response/header-policy.ts): marked once per delivery. */
function markedXds(config: CompiledConfig): CompiledConfig {
  const domains = new Map<string, CompiledDomain>();
  for (const [name, d] of config.domains) domains.set(name, d.fromXds ? d : { ...d, fromXds: true });
  return { ...config, domains };
}
