import { createHash } from 'node:crypto';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { compileDomain } from './compile.js';
import type { CompiledConfig, CompiledDomain } from './compiled.js';
import { ConfigError, type ConfigProblem } from './errors.js';
import { validateDomainFile } from './validate.js';

/** The YAML files of a config directory: top level only, hidden entries skipped (a Kubernetes ConfigMap
 * mount keeps its real files under ..data and links them from the top level). */
export function listConfigFiles(dir: string): string[] {
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch (err) {
    throw new ConfigError([{ file: dir, line: 0, column: 0, key: '', message: `cannot read directory: ${(err as Error).message}` }]);
  }
  return names
    .filter((n) => !n.startsWith('.') && /\.ya?ml$/i.test(n))
    .sort()
    .map((n) => join(dir, n))
    .filter((p) => statSync(p, { throwIfNoEntry: false })?.isFile() ?? false);
}

export interface ConfigSource {
  file: string;
  text: string;
}

/** Loads, validates and compiles every file in `dir`; throws ConfigError listing every problem found. */
export function loadConfigDir(dir: string): CompiledConfig {
  return compileSources(readConfigSources(dir));
}

export function readConfigSources(dir: string): ConfigSource[] {
  return listConfigFiles(dir).map((file) => {
    try {
      return { file, text: readFileSync(file, 'utf8') };
    } catch (err) {
      // e.g. removed between listing and reading, in the middle of a ConfigMap update
      throw new ConfigError([{ file, line: 0, column: 0, key: '', message: `cannot read: ${(err as Error).message}` }]);
    }
  });
}

/** Identifies a set of sources: a reload that finds the same hash has nothing to do. */
export function hashSources(sources: readonly ConfigSource[]): string {
  const hash = createHash('sha256');
  for (const { file, text } of sources) hash.update(file).update('\0').update(text).update('\0');
  return hash.digest('hex').slice(0, 12);
}

export function compileSources(sources: ConfigSource[]): CompiledConfig {
  const problems: ConfigProblem[] = [];
  const domains = new Map<string, CompiledDomain>();
  for (const { file, text } of sources) {
    const spec = validateDomainFile(file, text, problems);
    if (!spec) continue;
    const earlier = domains.get(spec.domain);
    if (earlier) {
      problems.push({ file, line: spec.line, column: 1, key: 'domain', message: `domain "${spec.domain}" is already defined in ${earlier.file}` });
      continue;
    }
    domains.set(spec.domain, compileDomain(spec));
  }
  if (problems.length > 0) throw new ConfigError(problems);
  return { domains, hash: hashSources(sources) };
}
