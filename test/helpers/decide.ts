import type { CompiledConfig, CompiledDomain } from '../../src/config/compiled.js';
import { compileSources } from '../../src/config/load.js';
import { ManualClock } from '../../src/counters/clock.js';
import { type Decision, type DescriptorInput, Limiter, type LimiterDeps } from '../../src/limiter/limiter.js';
import { MemoryStore } from '../../src/store/memory-store.js';

/** On an hour boundary (and so on a minute and second boundary): tests know where every window starts. */
export const T0 = 1_800_000_000_000;

/** Compiles YAML text as the service would a config directory holding it (one file per text). */
export function compileYaml(...texts: string[]): CompiledConfig {
  return compileSources(texts.map((text, i) => ({ file: `test-${i}.yaml`, text })));
}

export function domainOf(config: CompiledConfig, name: string): CompiledDomain {
  const d = config.domains.get(name);
  if (!d) throw new Error(`no domain ${name} in the test config`);
  return d;
}

/** Entries in the order written: `entries({category: 'read', token: 't'})`. */
export function entries(kv: Record<string, string>): { key: string; value: string }[] {
  return Object.entries(kv).map(([key, value]) => ({ key, value }));
}

export interface Harness {
  limiter: Limiter;
  clock: ManualClock;
  store: MemoryStore;
  /** Decides one request in `domain`: descriptors as entry maps, or as full DescriptorInputs. */
  decide(domain: string, descriptors: (Record<string, string> | DescriptorInput)[], hits?: number): Promise<Decision>;
}

/** The real Limiter over the real in-process store, on a clock that moves only when told. */
export function harness(yaml: string | CompiledConfig, opts: Pick<LimiterDeps, 'globalShadow' | 'globalQuota' | 'tiers'> = {}): Harness {
  const config = typeof yaml === 'string' ? compileYaml(yaml) : yaml;
  const clock = new ManualClock(T0);
  const store = new MemoryStore({ clock });
  const limiter = new Limiter({ config: () => config, store, clock, ...opts });
  return {
    limiter,
    clock,
    store,
    decide: async (domain, descriptors, hits = 1) =>
      limiter.decide({
        domain,
        hits,
        descriptors: descriptors.map((d) =>
          'entries' in d && Array.isArray(d.entries) ? (d as DescriptorInput) : { entries: entries(d as Record<string, string>) },
        ),
      }),
  };
}
