import { closeSync, constants, fstatSync, lstatSync, openSync, readdirSync, readSync, type Stats, statSync } from 'node:fs';
import { join } from 'node:path';
import { ConfigError, type ConfigProblem, fileProblem } from './errors.js';

/** Reading a config directory from a file system that may change under it (a ConfigMap's symlink swap, a
 * file deleted mid-read): within the limits, regular files only, read again when the set changed. */

/** How much config a load may read: checked with stat before a byte is read, so an oversize file costs
 * neither memory nor parse time. */
export interface ConfigLimits {
  maxFileBytes: number;
  maxDirBytes: number;
  /** MERGE_DOMAIN_CONFIG: files naming the same domain are merged instead of refused (the way a load reads
   * the set, so it travels with the bounds to the reader thread). */
  mergeDomains?: boolean;
  /** USE_CALENDAR_MONTH_RATE_LIMIT (config/calendar-months.ts), read with the set for the same reason. */
  calendarMonths?: boolean;
}

export const DEFAULT_MAX_CONFIG_BYTES = 4 * 1024 * 1024;
/** The directory may hold this many maximum-size files' worth of YAML. */
export const DIR_BYTES_FACTOR = 4;

export function configLimits(maxFileBytes = DEFAULT_MAX_CONFIG_BYTES, mergeDomains = false, calendarMonths = false): ConfigLimits {
  return { maxFileBytes, maxDirBytes: DIR_BYTES_FACTOR * maxFileBytes, mergeDomains, ...(calendarMonths && { calendarMonths }) };
}

/** What serve logs and check-config prints for a directory without config: both accept it at start. */
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
export const OPEN_FLAGS = constants.O_RDONLY | (constants.O_NONBLOCK ?? 0);

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
