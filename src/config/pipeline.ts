import type { Logger } from 'pino';
import type { CompiledConfig } from './compiled.js';
import { type ConfigProblem, fileProblem } from './errors.js';
import { ConfigAssembler, type ConfigLimits } from './load.js';
import { ReaderError, ReaderThread, readerHeapMb } from './reader-thread.js';
import type { ConfigOrigin, ReaderReply } from './reload-worker.js';
import { type ConfigDiff, diffDigests, digestOf, type RuleDigest, ruleDigest, ruleKey } from './rule-diff.js';

/** Longest a read and parse may take before the reader thread is stopped and the reload rejected. */
const READ_TIMEOUT_MS = 60_000;

/** What the reader thread made of a config set. */
export type ReadResult =
  | { type: 'unchanged'; hash: string; dirId: string | undefined }
  | { type: 'invalid'; hash: string | undefined; dirId: string | undefined; problems: ConfigProblem[] }
  | { type: 'valid'; hash: string; dirId: string | undefined; domains: number; slices: number; notes: string[] };

export type SwapResult =
  | { type: 'reloaded'; previous: CompiledConfig; next: CompiledConfig; diff: ConfigDiff }
  | { type: 'invalid'; problems: ConfigProblem[] };

/** The way every config set becomes the running one, whichever source it comes from (the config directory,
 * an xDS management server): read, parsed and validated on the reader thread, then compiled on the main
 * thread in slices, so decisions keep being answered during a reload of any size the limits admit. One
 * request at a time: its sources run one reload at a time. */
export class ConfigPipeline {
  private running: CompiledConfig;
  private digest: RuleDigest;
  private readonly reader: ReaderThread;
  private reading: ConfigOrigin['kind'] = 'dir';

  constructor(current: CompiledConfig, limits: ConfigLimits, logger: Logger) {
    this.running = current;
    this.digest = ruleDigest(current);
    this.reader = new ReaderThread(readerHeapMb(limits), READ_TIMEOUT_MS, (hash) =>
      logger.debug({ hash }, this.reading === 'dir' ? 'config directory changed: validating' : 'xDS config changed: validating'),
    );
  }

  get current(): CompiledConfig {
    return this.running;
  }

  /** Reads and validates a set on the reader thread; `skip` lists hashes that need no validation. `where`
   * names the source in a problem that is not about one file (the reader timed out, ran out of memory). */
  async read(origin: ConfigOrigin, limits: ConfigLimits, skip: string[], where: string): Promise<ReadResult> {
    let reply: ReaderReply;
    this.reading = origin.kind;
    try {
      reply = await this.reader.ask({ type: 'read', origin, limits, skip }, transferables(origin));
    } catch (err) {
      return { type: 'invalid', hash: this.reader.lastHash, dirId: undefined, problems: [readerProblem(where, err)] };
    }
    if (reply.type === 'slice' || reply.type === 'hashed')
      return { type: 'invalid', hash: undefined, dirId: undefined, problems: [readerProblem(where, new Error(`unexpected ${reply.type} answer`))] };
    return reply;
  }

  /** Compiles a set read valid and makes it the running one. */
  async swapIn(hash: string, slices: number, where: string): Promise<SwapResult> {
    let next: { config: CompiledConfig; digest: RuleDigest };
    try {
      next = await this.assemble(hash, slices);
    } catch (err) {
      return { type: 'invalid', problems: [readerProblem(where, err)] };
    }
    const previous = this.running;
    const diff = diffDigests(this.digest, next.digest);
    this.running = next.config;
    this.digest = next.digest;
    return { type: 'reloaded', previous, next: next.config, diff };
  }

  close(): void {
    this.reader.close();
  }

  /** Asks for the slices one at a time: each costs the event loop a few milliseconds, and decisions waiting
   * in between are answered before the next (all at once, the copies alone would stall them). */
  private async assemble(hash: string, slices: number): Promise<{ config: CompiledConfig; digest: RuleDigest }> {
    const assembler = new ConfigAssembler();
    const digest: RuleDigest = new Map();
    for (let index = 0; index < slices; index++) {
      const reply = await this.reader.ask({ type: 'slice', index });
      if (reply.type !== 'slice' || reply.index !== index || !reply.spec) throw new Error(`expected slice ${index}, got ${reply.type}`);
      for (const rule of assembler.add(reply.spec)) digest.set(ruleKey(rule), digestOf(rule));
    }
    return { config: assembler.finish(hash), digest };
  }
}

/** xDS resources travel to the reader thread without a copy. */
function transferables(origin: ConfigOrigin): ArrayBuffer[] {
  if (origin.kind !== 'xds') return [];
  return origin.resources.map((r) => r.value.buffer as ArrayBuffer);
}

function readerProblem(where: string, err: unknown): ConfigProblem {
  if (err instanceof ReaderError) return fileProblem(where, err.code, err.message);
  return fileProblem(where, 'INTERNAL', `reload failed: ${(err as Error).message}`);
}
