import { isMap, isScalar, isSeq, type LineCounter, type Node, type YAMLMap } from 'yaml';
import type { ConfigProblem } from './errors.js';
import { MAX_UINT32 } from './units.js';

/** Walks one YAML document, collecting every problem with its file, line, column and key path. */
export class Reader {
  readonly problems: ConfigProblem[] = [];
  /** Things that load but deserve a word: `file:line: key: note`. */
  readonly notes: string[] = [];
  constructor(
    readonly file: string,
    private readonly lines: LineCounter,
  ) {}

  fail(node: Node | null | undefined, key: string, message: string): void {
    const offset = node?.range?.[0] ?? 0;
    const { line, col } = this.lines.linePos(offset);
    this.problems.push({ file: this.file, line, column: col, key, message });
  }

  note(node: Node | undefined, key: string, message: string): void {
    this.notes.push(`${this.file}:${this.line(node)}: ${key}: ${message}`);
  }

  line(node: Node | null | undefined): number {
    return this.lines.linePos(node?.range?.[0] ?? 0).line;
  }

  /** The map's entries, after reporting keys that are not in `allowed`. */
  fields(node: unknown, path: string, allowed: readonly string[]): Map<string, Node> | undefined {
    if (!isMap(node)) {
      this.fail(node as Node, path, 'must be a mapping');
      return undefined;
    }
    const out = new Map<string, Node>();
    for (const pair of (node as YAMLMap).items) {
      const keyNode = pair.key as Node;
      const name = isScalar(keyNode) ? String(keyNode.value) : '';
      const at = path ? `${path}.${name}` : name;
      if (!allowed.includes(name)) {
        this.fail(keyNode, at, `unknown key (allowed: ${allowed.join(', ')})`);
        continue;
      }
      out.set(name, (pair.value ?? keyNode) as Node);
    }
    return out;
  }

  string(node: Node | undefined, path: string, opts: { nonEmpty?: boolean; numbers?: boolean } = {}): string | undefined {
    if (node === undefined) {
      return undefined;
    }
    if (isScalar(node) && typeof node.value === 'string') {
      if (opts.nonEmpty && node.value === '') this.fail(node, path, 'must not be empty');
      return node.value;
    }
    if (opts.numbers && isScalar(node) && typeof node.value === 'number') return String(node.source ?? node.value);
    this.fail(node, path, 'must be a string');
    return undefined;
  }

  boolean(node: Node | undefined, path: string): boolean {
    if (node === undefined) return false;
    if (isScalar(node) && typeof node.value === 'boolean') return node.value;
    this.fail(node, path, 'must be true or false');
    return false;
  }

  /** A whole number from 0 to `max` (a uint32 unless said: every count on the wire is one). */
  count(node: Node | undefined, path: string, max = MAX_UINT32): number | undefined {
    if (node === undefined) return undefined;
    const v = isScalar(node) ? node.value : undefined;
    if (typeof v !== 'number' || !Number.isInteger(v)) {
      this.fail(node, path, 'must be a whole number');
    } else if (v < 0) {
      this.fail(node, path, `must not be negative (got ${v})`);
    } else if (v > max) {
      this.fail(node, path, `must be at most ${max}`);
    } else {
      return v;
    }
    return undefined;
  }

  oneOf<T extends string>(node: Node | undefined, path: string, options: readonly T[]): T | undefined {
    const text = this.string(node, path);
    if (text === undefined) return undefined;
    if ((options as readonly string[]).includes(text)) return text as T;
    this.fail(node, path, `must be one of ${options.join(', ')} (got "${text}")`);
    return undefined;
  }

  list(node: Node | undefined, path: string): Node[] {
    // `descriptors:` with nothing after it is an empty list, as envoyproxy/ratelimit reads it.
    if (node === undefined || (isScalar(node) && node.value === null)) return [];
    if (isSeq(node)) return node.items as Node[];
    this.fail(node, path, 'must be a list');
    return [];
  }
}

/** What validating one file found: the domain (undefined when the file has problems, listed in `out`), and
 * its name and line whenever the file names one, so a domain defined twice is reported together with every
 * other problem rather than only once both files are otherwise valid. */
