import { UserError } from '../errors.js';
/** One problem in a descriptor config file, located precisely enough to fix it without searching. */
export interface ConfigProblem {
  file: string;
  /** 0 when the problem is the file as a whole (it could not be read, or is too large), not a place in it. */
  line: number;
  column: number;
  /** Dotted path of the offending key, e.g. descriptors[0].rate_limit.unit */
  key: string;
  message: string;
  /** Set when the file or directory could not be read: the system error code (ELOOP, EACCES, ENOENT, …) or
   * one of Tollgate's own (NOT_A_FILE, TOO_LARGE, CHANGED, EMPTY), so logs can be searched by cause. */
  code?: string;
}

export function formatProblem(p: ConfigProblem): string {
  const where = p.line > 0 ? `${p.file}:${p.line}:${p.column}` : p.file;
  return `${where}: ${p.key ? `${p.key}: ` : ''}${p.message}`;
}

/** A problem with a file or directory as a whole: it could not be listed, opened or read, or is too large. */
export function fileProblem(file: string, code: string, message: string): ConfigProblem {
  return { file, line: 0, column: 0, key: '', message, code };
}

/** Thrown when a config set is invalid; carries every problem found, not just the first. */
export class ConfigError extends UserError {
  override readonly name = 'ConfigError';
  readonly code = 'CONFIG_INVALID';
  constructor(readonly problems: ConfigProblem[]) {
    super(problems.map(formatProblem).join('\n'));
  }
}
