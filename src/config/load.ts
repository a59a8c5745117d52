import { createHash } from 'node:crypto';
import { closeSync, constants, fstatSync, lstatSync, openSync, readdirSync, readSync, type Stats, statSync } from 'node:fs';
import { basename, join } from 'node:path';
import { compileDomain } from './compile.js';
import type { CompiledConfig, CompiledDomain, KeyBranch, MatchNode, Rule } from './compiled.js';
import { ConfigError, type ConfigProblem, fileProblem } from './errors.js';
import type { DescriptorSpec, DomainSpec } from './spec.js';
import { validateDomainFile } from './validate.js';

/** How much config a load may read: checked with stat before a byte is read, so an oversize file costs
 * neither memory nor parse time. */
export interface ConfigLimits {
  maxFileBytes: number;
  maxDirBytes: number;
  /** MERGE_DOMAIN_CONFIG: files naming the same domain are merged instead of refused (the way a load reads
   * the set, so it travels with the bounds to the reader thread). */
  mergeDomains?: boolean;
}

export const DEFAULT_MAX_CONFIG_BYTES = 4 * 1024 * 1024;
/** The directory may hold this many maximum-size files' worth of YAML. */
export const DIR_BYTES_FACTOR = 4;

export function configLimits(maxFileBytes = DEFAULT_MAX_CONFIG_BYTES, mergeDomains = false): ConfigLimits {
  return { maxFileBytes, maxDirBytes: DIR_BYTES_FACTOR * maxFileBytes, mergeDomains };
}

/** What serve logs and check-config prints for a directory without config: both accept it at start. */
export const NO_CONFIG_WARNING = 'no descriptor config found: every request will pass until one is added';

export interface ConfigSource {
  file: string;
  text: string;
}

/** A config file as listed: what it was when stat'ed, to notice it changing while it is read. */
interface Listed {
  path: string;
  size: number;
  ino: number;
  mtimeMs: number;
}

/** The directory changed under a read (a file vanished, was rewritten or replaced): the set read may mix
 * versions, so it is read again rather than loaded or reported. */
class Raced extends Error {
  constructor(readonly problem: ConfigProblem) {
    super(problem.message);
  }
}

const RACE_ATTEMPTS = 3;
const RACE_PAUSE_MS = 25;
// A FIFO opened without O_NONBLOCK blocks until a writer appears; with it, open returns and fstat tells.
const OPEN_FLAGS = constants.O_RDONLY | (constants.O_NONBLOCK ?? 0);

/** Loads, validates and compiles every file in `dir`; throws ConfigError listing every problem found. */
export function loadConfigDir(dir: string, limits: ConfigLimits = configLimits()): CompiledConfig {
  return compileSources(readConfigSources(dir, limits), limits.mergeDomains);
}

/** Reads the YAML files of a config directory: top level only, hidden entries skipped (a Kubernetes
 * ConfigMap mount keeps its real files under ..data and links them from the top level). Only regular files
 * (or links to them) within the limits are opened. A set that changes while it is read is read again.
 * `dir` may also name one file, read alone under the same rules (check-config FILE). */
export function readConfigSources(dir: string, limits: ConfigLimits = configLimits()): ConfigSource[] {
  for (let attempt = 1; ; attempt++) {
    try {
      const listed = isFile(dir) ? listFiles(dir, [dir], limits) : listConfigFiles(dir, limits);
      const sources = listed.map((f) => ({ file: f.path, text: readListed(f) }));
      for (const f of listed) unchangedSince(f, statOrRace(f.path));
      return sources;
    } catch (err) {
      if (!(err instanceof Raced)) throw err;
      if (attempt >= RACE_ATTEMPTS) throw new ConfigError([err.problem]);
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, RACE_PAUSE_MS);
    }
  }
}

function listConfigFiles(dir: string, limits: ConfigLimits): Listed[] {
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch (err) {
    throw new ConfigError([systemProblem(dir, 'read the config directory', err)]);
  }
  const paths = names
    .filter((n) => !n.startsWith('.') && /\.ya?ml$/i.test(n))
    .sort()
    .map((n) => join(dir, n));
  return listFiles(dir, paths, limits);
}

/** A path that is a regular file (or a link to one): read as a config set of one file. */
function isFile(path: string): boolean {
  return statSync(path, { throwIfNoEntry: false })?.isFile() ?? false;
}

/** Checks each path's kind and size before anything is read: every problem at once. */
function listFiles(dir: string, paths: readonly string[], limits: ConfigLimits): Listed[] {
  const problems: ConfigProblem[] = [];
  const files: Listed[] = [];
  let total = 0;
  for (const path of paths) {
    const st = statEntry(path, problems);
    if (!st) continue;
    if (!st.isFile()) {
      problems.push(fileProblem(path, 'NOT_A_FILE', `not a regular file (${kindOf(st)}); only regular files or links to them are read`));
    } else if (st.size > limits.maxFileBytes) {
      problems.push(fileProblem(path, 'TOO_LARGE', `${bytes(st.size)}, more than the maximum of ${bytes(limits.maxFileBytes)} per file (--max-config-bytes)`));
    } else {
      total += st.size;
      files.push({ path, size: st.size, ino: st.ino, mtimeMs: st.mtimeMs });
    }
  }
  if (total > limits.maxDirBytes) {
    problems.push(
      fileProblem(
        dir,
        'TOO_LARGE',
        `the config files add up to ${bytes(total)}, more than the maximum of ${bytes(limits.maxDirBytes)} per directory (${DIR_BYTES_FACTOR} × ` +
          `--max-config-bytes)`,
      ),
    );
  }
  if (problems.length > 0) throw new ConfigError(problems);
  return files;
}

/** stat (following links), or undefined for an entry that is not there to read: a dangling link, as a
 * ConfigMap leaves for a moment while a key is removed. A listed entry that vanished is a race. */
function statEntry(path: string, problems: ConfigProblem[]): Stats | undefined {
  try {
    return statSync(path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') {
      problems.push(systemProblem(path, 'read', err));
      return undefined;
    }
    if (lstatSync(path, { throwIfNoEntry: false })) return undefined;
    throw new Raced(systemProblem(path, 'read (it vanished while the directory was read)', err));
  }
}

/** Reads one listed file through its descriptor, never more than the size it was listed (and admitted)
 * with: a file that is no longer what was listed is a race, not a reason to read without bound. */
function readListed(f: Listed): string {
  let fd: number;
  try {
    fd = openSync(f.path, OPEN_FLAGS);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') throw new Raced(systemProblem(f.path, 'read (it vanished while being read)', err));
    throw new ConfigError([systemProblem(f.path, 'read', err)]);
  }
  try {
    const st = fstatSync(fd);
    unchangedSince(f, st);
    const buf = Buffer.allocUnsafe(f.size + 1);
    let n = 0;
    for (;;) {
      const got = n < buf.length ? readSync(fd, buf, n, buf.length - n, n) : 0;
      if (got === 0) break;
      n += got;
    }
    if (n !== f.size) throw new Raced(fileProblem(f.path, 'CHANGED', 'changed while being read'));
    unchangedSince(f, fstatSync(fd));
    return buf.toString('utf8', 0, n);
  } finally {
    closeSync(fd);
  }
}

function statOrRace(path: string): Stats {
  try {
    return statSync(path);
  } catch (err) {
    throw new Raced(systemProblem(path, 'read (it vanished while the directory was read)', err));
  }
}

function unchangedSince(f: Listed, st: Stats): void {
  if (!st.isFile() || st.ino !== f.ino || st.size !== f.size || st.mtimeMs !== f.mtimeMs) {
    throw new Raced(fileProblem(f.path, 'CHANGED', 'changed while being read'));
  }
}

/** Names the cause with the system's code and words; Node's message also repeats the path, already named. */
function systemProblem(file: string, what: string, err: unknown): ConfigProblem {
  const e = err as NodeJS.ErrnoException;
  const code = e.code ?? 'EIO';
  const description = /^[A-Z0-9_]+: ([^,]+)/.exec(e.message ?? '')?.[1] ?? String(e.message);
  return fileProblem(file, code, `cannot ${what} (${code}: ${description})`);
}

function kindOf(st: Stats): string {
  if (st.isDirectory()) return 'a directory';
  if (st.isFIFO()) return 'a FIFO';
  if (st.isSocket()) return 'a socket';
  if (st.isCharacterDevice() || st.isBlockDevice()) return 'a device';
  return 'not a file';
}

function bytes(n: number): string {
  return n >= 1024 * 1024 ? `${n} bytes (${(n / 1024 / 1024).toFixed(1)} MiB)` : `${n} bytes`;
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
  const settings = (s: DomainSpec): string => JSON.stringify([s.headers, s.tiers, s.tokenKey, s.algorithm]);
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

export function compileSources(sources: ConfigSource[], mergeDomains = false): CompiledConfig {
  return compileSpecs(validateSources(sources, mergeDomains), hashSources(sources));
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
