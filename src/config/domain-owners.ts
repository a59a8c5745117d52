import { createHash } from 'node:crypto';
import type { CompiledConfig, CompiledDomain } from './compiled.js';

/** One service, several config sources (xDS management servers, the config directory): each source owns
 * the domains it sends, and the running config is the union of what each owns. A domain is owned by the
 * source that had it first; another source that claims it too is refused for that domain (its other domains
 * apply), until the owner drops it. A source that goes quiet keeps its domains: only what it sends changes
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
  /** Domains that changed hands because their owner dropped them. */
  moved: { domain: string; to: string }[];
}

export class DomainOwners {
  private readonly configs: (CompiledConfig | undefined)[];
  private readonly owner = new Map<string, number>();

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
    const moved = this.reassign();
    const refused: Composed['refused'] = [];
    for (const name of this.configs[index]!.domains.keys()) {
      const owner = this.owner.get(name)!;
      if (owner !== index) refused.push({ domain: name, owner: this.sources[owner]!.label });
    }
    return { config: this.union(), refused, moved };
  }

  /** Owners keep their domains while they still send them; the rest go to the first source that has them. */
  private reassign(): Composed['moved'] {
    const released = new Set<string>();
    for (const [name, i] of this.owner) {
      if (this.configs[i]?.domains.has(name)) continue;
      this.owner.delete(name);
      released.add(name);
    }
    const moved: Composed['moved'] = [];
    this.configs.forEach((config, i) => {
      for (const name of config?.domains.keys() ?? []) {
        if (this.owner.has(name)) continue;
        if (released.has(name)) moved.push({ domain: name, to: this.sources[i]!.label });
        this.owner.set(name, i);
      }
    });
    return moved;
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
