import { createHash } from 'node:crypto';
import { basename } from 'node:path';
import { calendarMonths } from './calendar-months.js';
import { compileDomain } from './compile.js';
import type { CompiledConfig, CompiledDomain, KeyBranch, MatchNode, Rule } from './compiled.js';
import { ConfigError, type ConfigProblem } from './errors.js';
import { type ConfigLimits, type ConfigSource, configLimits, readConfigSources } from './read-dir.js';
import type { DescriptorSpec, DomainSpec } from './spec.js';
import { validateDomainFile } from './validate.js';

export { type ConfigLimits, type ConfigSource, configLimits, DEFAULT_MAX_CONFIG_BYTES, DIR_BYTES_FACTOR, readConfigSources } from './read-dir.js';

export const NO_CONFIG_WARNING = 'no descriptor config found: every request will pass until one is added';

/** Loads, validates and compiles every file in `dir`; throws ConfigError listing every problem found. */
export function loadConfigDir(dir: string, limits: ConfigLimits = configLimits()): CompiledConfig {
  return compileSources(readConfigSources(dir, limits), limits.mergeDomains, limits.calendarMonths);
}

/** Identifies a set of sources by content alone: each file's name within the directory (files are read
 * from its top level only, so the base name is that name) and its text. The same files hash the same
 * wherever they are mounted or however the directory is spelt, so CI can compare the hash check-config
 * printed with the one a pod reports in tollgate_config_info. A reload that finds the same hash has nothing
 * to do. */
export function hashSources(sources: readonly ConfigSource[], nameOf: (file: string) => string = basename): string {
  const hash = createHash('sha256');
  for (const { file, text } of sources) hash.update(nameOf(file)).update('\0').update(text).update('\0');
  return hash.digest('hex').slice(0, 12);
}

/** Validates every file and the set as a whole (a domain is defined once, or with `merge` its files are
 * merged); throws with every problem, a domain defined twice among them even when either file has other
 * problems too. */
export function validateSources(sources: readonly ConfigSource[], merge = false): DomainSpec[] {
  const problems: ConfigProblem[] = [];
  const specs = new Map<string, DomainSpec | undefined>();
  const firstFile = new Map<string, string>();
  for (const { file, text } of sources) {
    const { spec, domain } = validateDomainFile(file, text, problems, merge);
    if (!domain) continue;
    const earlier = firstFile.get(domain.name);
    if (earlier === undefined) {
      firstFile.set(domain.name, file);
      specs.set(domain.name, spec);
    } else if (!merge) {
      problems.push({
        file,
        line: domain.line,
        column: 1,
        key: 'domain',
        message: `domain "${domain.name}" is already defined in ${earlier} (set MERGE_DOMAIN_CONFIG=true to merge them)`,
      });
    } else {
      const into = specs.get(domain.name);
      if (into && spec) mergeDomain(into, spec, problems);
    }
  }
  if (problems.length > 0) throw new ConfigError(problems);
  return [...specs.values()].filter((s): s is DomainSpec => s !== undefined);
}

/** MERGE_DOMAIN_CONFIG, as envoyproxy/ratelimit's loadConfig does it (src/config/config_impl.go): the later
 * file's top-level descriptors join the domain's; one the domain already has (same key and value) is
 * refused. Tollgate's domain-level settings (headers, tiers, token_key, algorithm) must agree. */
function mergeDomain(into: DomainSpec, from: DomainSpec, problems: ConfigProblem[]): void {
  // A file that does not say which headers goes with the one that does.
  const headers = into.headers ?? from.headers;
  const settings = (s: DomainSpec): string => JSON.stringify([s.headers ?? headers, s.tiers, s.tokenKey, s.algorithm]);
  if (settings(into) !== settings(from)) {
    problems.push({
      file: from.file,
      line: from.line,
      column: 1,
      key: 'domain',
      message:
        `domain "${from.domain}" is merged with ${into.file}, whose response_headers, tiers, token_key or algorithm differ: merged files ` +
        `must agree on them`,
    });
    return;
  }
  const names = limitNames(into.descriptors);
  for (const [name, at] of limitNames(from.descriptors)) {
    const first = names.get(name);
    if (first)
      problems.push({
        file: from.file,
        line: at.line,
        column: 1,
        key: 'name',
        message: `duplicate limit name "${name}" in domain "${from.domain}" (first used at ${first.file ?? into.file}:${first.line})`,
      });
  }
  const seen = new Map(into.descriptors.map((d) => [descriptorId(d), d]));
  for (const d of from.descriptors) {
    const first = seen.get(descriptorId(d));
    if (first) {
      problems.push({
        file: from.file,
        line: d.line,
        column: 1,
        key: 'descriptors',
        message: `duplicate descriptor ${descriptorId(d)} in domain "${from.domain}" (also at ${first.file ?? into.file}:${first.line})`,
      });
      continue;
    }
    stampFile(d, from.file);
    seen.set(descriptorId(d), d);
    into.descriptors.push(d);
  }
  into.notes.push(...from.notes);
  into.headers = headers;
}

const descriptorId = (d: DescriptorSpec): string => (d.value === undefined ? d.key : `${d.key}=${d.value}`);

/** Every named limit of a descriptor tree, with the descriptor that holds it. */
function limitNames(list: readonly DescriptorSpec[], out = new Map<string, DescriptorSpec>()): Map<string, DescriptorSpec> {
  for (const d of list) {
    for (const l of d.limits) if (l.name !== undefined && !out.has(l.name)) out.set(l.name, d);
    limitNames(d.children, out);
  }
  return out;
}

/** Descriptors merged in from another file keep saying where they were written. */
function stampFile(d: DescriptorSpec, file: string): void {
  d.file = file;
  for (const c of d.children) stampFile(c, file);
}

export function compileSpecs(specs: readonly DomainSpec[], hash: string): CompiledConfig {
  return { domains: new Map(specs.map((s) => [s.domain, compileDomain(s)])), hash };
}

/** No domain at all: every request passes. What an xDS-fed service decides by before its first config. */
export function emptyConfig(): CompiledConfig {
  return compileSpecs(
    [],
    hashSources([], (f) => f),
  );
}

/** Before the first config from an xDS server: none at all, which decisions answer with an error
 * (limiter.ts). Its hash is no config's, so that the first response is applied even when it is empty. */
export function pendingConfig(): CompiledConfig {
  return { ...emptyConfig(), hash: 'none', pending: true };
}

export function compileSources(sources: ConfigSource[], mergeDomains = false, calendar = false): CompiledConfig {
  const specs = validateSources(sources, mergeDomains);
  if (calendar) calendarMonths(specs);
  return compileSpecs(specs, hashSources(sources));
}

// Compiling in slices. A large config takes ~100 ms to compile and as long again to copy from the thread
// that parsed it, which would stall every decision. So it is cut into slices, each a copy of the domain
// with a run of its descriptors (in the order compile visits them) and, above them, bare copies of their
// ancestors that carry no limits; each slice is copied and compiled on its own, and the results are merged.

/** Cuts validated domains into slices of about `weight` descriptors and limits each, in compile order. */
export function sliceSpecs(specs: readonly DomainSpec[], weight: number): DomainSpec[] {
  const slices: DomainSpec[] = [];
  for (const spec of specs) {
    let slice: DomainSpec | undefined;
    let used = 0;
    const ancestors: DescriptorSpec[] = [];
    let copies: DescriptorSpec[] = [];
    const attach = (d: DescriptorSpec): DescriptorSpec => {
      (copies.at(-1)?.children ?? slice!.descriptors).push(d);
      return d;
    };
    const open = (): void => {
      slice = { ...spec, descriptors: [] };
      slices.push(slice);
      used = 0;
      copies = [];
      for (const a of ancestors) copies.push(attach({ ...a, limits: [], unlimited: false, tierLimits: new Map(), children: [] }));
    };
    const walk = (list: readonly DescriptorSpec[]): void => {
      for (const d of list) {
        if (!slice || used >= weight) open();
        copies.push(attach({ ...d, children: [] }));
        used += 1 + d.limits.length + [...d.tierLimits.values()].reduce((n, ls) => n + ls.length, 0);
        ancestors.push(d);
        walk(d.children);
        ancestors.pop();
        copies.pop();
      }
    };
    walk(spec.descriptors);
    if (!slice) open();
  }
  return slices;
}

type Mutable<T> = { -readonly [K in keyof T]: T[K] };

/** Compiles slices one at a time into one config equal to compiling the whole at once. */
export class ConfigAssembler {
  private readonly domains = new Map<string, CompiledDomain>();
  private readonly patternIndex = new WeakMap<KeyBranch, Map<string, MatchNode>>();

  /** Compiles and merges one slice; returns the rules it added. */
  add(slice: DomainSpec): readonly Rule[] {
    const part = compileDomain(slice);
    const into = this.domains.get(part.name);
    if (!into) this.domains.set(part.name, part);
    else {
      this.mergeLevel(into.root as Map<string, KeyBranch>, part.root);
      (into.rules as Rule[]).push(...part.rules);
    }
    return part.rules;
  }

  /** Slices arrive in file order, so wildcards appended here keep the order matching tries them in. */
  finish(hash: string): CompiledConfig {
    return { domains: this.domains, hash };
  }

  private mergeLevel(into: Map<string, KeyBranch>, from: ReadonlyMap<string, KeyBranch>): void {
    for (const [key, b] of from) {
      const a = into.get(key) as Mutable<KeyBranch> | undefined;
      if (!a) {
        into.set(key, b);
        continue;
      }
      for (const [value, node] of b.exact) {
        const mine = a.exact.get(value);
        if (mine) this.mergeNode(mine, node);
        else (a.exact as Map<string, MatchNode>).set(value, node);
      }
      const index = this.patternIndex.get(a) ?? new Map(a.patterns.map((p) => [p.pattern, p.node]));
      this.patternIndex.set(a, index);
      for (const p of b.patterns) {
        const mine = index.get(p.pattern);
        if (mine) this.mergeNode(mine, p.node);
        else {
          (a.patterns as KeyBranch['patterns'][number][]).push(p);
          index.set(p.pattern, p.node);
        }
      }
      if (b.any && a.any) this.mergeNode(a.any, b.any);
      else if (b.any) a.any = b.any;
    }
  }

  /** A node in two slices: its rule comes from the one slice that owns it (the others hold a bare copy). */
  private mergeNode(a: Mutable<MatchNode>, b: MatchNode): void {
    a.rule ??= b.rule;
    if (!b.children) return;
    if (!a.children) a.children = b.children;
    else this.mergeLevel(a.children as Map<string, KeyBranch>, b.children);
  }
}
