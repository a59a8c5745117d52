/** The V8 heap settings `tollgate serve` runs with, however it was started (the image, `npm start`, `node
 * dist/cli.js serve`, Envoy Gateway's `command: [/bin/ratelimit]`), so the memory bound docs/operations.md
 * states holds on every Node.js line Tollgate supports.
 *
 * Why: the bound's test (test/adversarial/memory-bound.test.ts) grew RSS by ~60 MB on Node 20 and by 200-250 MB
 * on Node 24, with the same live data: after a full GC the heap held 18-20 MB before and after the flood, on
 * both. The store keeps nothing more; the runtime sizes its heap differently: Node 22+'s V8 lets a semi-space
 * of the young generation grow to 64 MB on a 64-bit build (Node 20's: 16 MB; deps/v8/src/heap/heap.cc,
 * Heap::DefaultMaxSemiSpaceSize), so new space alone took 128 MB where it took 32. --max-semi-space-size=16
 * gives back Node 20's. Measured on Node 24.21 (the bound's flood): RSS +200-250 MB by default, +105-120 MB
 * with it; CPU per decision under h2load the same as without it (BENCHMARKS.md, 2026-11-26, alternating rounds).
 *
 * Not --heap-growing-percent=50 (the old generation grown 1.5 times its live size before a full GC, where V8
 * lets it grow up to 4 times), which this list held until 2026-11-26: it took RSS down to +50-70 MB, but cost
 * 20-25 % more CPU per decision at saturation (44 against 33 µs with the memory store, 49 against 39 with Redis,
 * in the same run), most with the Redis store, whose requests wait long enough to be promoted.
 *
 * --no-allocation-site-pretenuring, from Node 24 on: V8 watches how many objects of each allocation site survive a
 * young-generation GC and, past a share, allocates that site's objects in the old generation from then on. Under
 * load on Node 24 some of node:http2's per-stream sites cross it (at a GC, the streams in flight survive), and
 * stay there: every stream's objects then start old, what they point to survives each scavenge through them,
 * and only a full GC frees any of it. Measured on Node 24.21 under h2load (--trace-gc-nvp, bench/paired.mjs;
 * BENCHMARKS.md, 2026-11-26 late): promoted bytes a decision 2,072 -> 63 (Redis store), no full GC in 3 s where
 * there were 4, young-GC pause a decision 2.82 -> 0.68 µs; CPU µs a decision 7-17 % lower with either store.
 * Whether a run fell into that state depended on its first seconds, which is part of why one target's rounds
 * differed by up to 35 %. Node 22.23 did not fall into it (176 bytes promoted a Redis decision with
 * pretenuring, 39 without), and there the flag cost CPU: 5 % a decision with the memory store, nothing with
 * Redis (paired), so Node 22 keeps V8's pretenuring. */
const SEMI_SPACE = '--max-semi-space-size=16';
const NO_PRETENURING = '--no-allocation-site-pretenuring';
/** V8's gc(), which heap-trim.ts calls to give a heap grown by a burst back to the system once the process is
 * quiet: nothing else in the runtime shrinks it. An operator's --no-expose-gc turns that off. */
const EXPOSE_GC = '--expose-gc';

/** The heap flags `serve` runs with on a Node version (`process.version`). */
export function heapFlags(version: string = process.version): string[] {
  const major = Number(/^v(\d+)\./.exec(version)?.[1] ?? 0);
  return major >= 24 ? [SEMI_SPACE, NO_PRETENURING, EXPOSE_GC] : [SEMI_SPACE, EXPOSE_GC];
}

/** Set in the environment of the re-executed process, so it can never loop. */
const MARK = 'TOLLGATE_HEAP_FLAGS_SET';

type Execve = (file: string, args: string[], env: NodeJS.ProcessEnv) => never;

/** A V8 flag's name: no value, dashes for underscores, two leading dashes, and no `no` (V8 reads `-flag`,
 * `--no-flag`, `--noflag` and `--no_flag` as the same flag's settings). */
const flagName = (arg: string): string =>
  arg
    .split('=')[0]!
    .replaceAll('_', '-')
    .replace(/^--?(?:no-?)?/, '--');

/** The flags of heapFlags() this process was not started with. An operator's own value of one (on the command
 * line or in NODE_OPTIONS; the pretenuring flag can only be given on the command line) is theirs: it is not
 * replaced. */
export function missingHeapFlags(execArgv: readonly string[], nodeOptions = '', flags: readonly string[] = heapFlags()): string[] {
  const given = [...execArgv, ...nodeOptions.split(/\s+/)].map(flagName);
  return flags.filter((f) => !given.includes(flagName(f)));
}

/** Replaces this process with itself started with the missing heap flags (process.execve: the same pid, stdio
 * and environment, so a supervisor's signals still reach it). Returns, having done nothing, when none is
 * missing, after one re-execution, or on a runtime without process.execve (Node 22.12-22.14): there the young
 * generation is V8's default (NODE_OPTIONS=--max-semi-space-size=16 sets it) and pretenuring stays on (Node
 * refuses that flag in NODE_OPTIONS: only the command line sets it). cli.ts calls it for `serve` before loading
 * anything else. */
export function reexecWithHeapFlags(): void {
  const missing = missingHeapFlags(process.execArgv, process.env.NODE_OPTIONS);
  const execve = (process as unknown as { execve?: Execve }).execve;
  if (missing.length === 0 || process.env[MARK] || typeof execve !== 'function') return;
  execve(process.execPath, [process.execPath, ...process.execArgv, ...missing, ...process.argv.slice(1)], { ...process.env, [MARK]: '1' });
}
