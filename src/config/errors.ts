/** One problem in a descriptor config file, located precisely enough to fix it without searching. */
export interface ConfigProblem {
  file: string;
  line: number;
  column: number;
  /** Dotted path of the offending key, e.g. descriptors[0].rate_limit.unit */
  key: string;
  message: string;
}

export function formatProblem(p: ConfigProblem): string {
  return `${p.file}:${p.line}:${p.column}: ${p.key ? `${p.key}: ` : ''}${p.message}`;
}

/** Thrown when a config set is invalid; carries every problem found, not just the first. */
export class ConfigError extends Error {
  override readonly name = 'ConfigError';
  readonly code = 'CONFIG_INVALID';
  constructor(readonly problems: ConfigProblem[]) {
    super(problems.map(formatProblem).join('\n'));
  }
}
