import { readlinkSync, statSync } from 'node:fs';
import { setPriority } from 'node:os';
import { parentPort } from 'node:worker_threads';
import { calendarMonths } from './calendar-months.js';
import { ConfigError, type ConfigProblem, fileProblem } from './errors.js';
import { type ConfigLimits, type ConfigSource, hashSources, readConfigSources, sliceSpecs, validateSources } from './load.js';
import { missedNote, type OverlayEntry, parseOverlay } from './overlay.js';
import { type XdsResource, xdsSources } from './rls-conf.js';
import type { DomainSpec } from './spec.js';

/** Where a config set comes from: the config directory, or the resources of an xDS response. */
export type ConfigOrigin = { kind: 'dir'; dir: string } | { kind: 'xds'; resources: XdsResource[]; overlay?: OverlayText };

/** XDS_OVERLAY_FILE's text, as last read (overlay.ts): parsed and applied here, with the resources. */
export interface OverlayText {
  file: string;
  text: string;
}

/** The config reader thread: reads, hashes, parses and validates a config set off the event loop,
 * then hands the result over in slices the main thread asks for one by one (see sliceSpecs), so neither
 * parsing a large file nor copying its result stalls decisions. Everything it sends is plain data. */

export type ReaderRequest =
  | { type: 'read'; origin: ConfigOrigin; limits: ConfigLimits /** Hashes that need no validation (running, last rejected). */; skip: string[] }
  | { type: 'slice'; index: number };

export type ReaderReply =
  /** Progress: the set is read and about to be parsed, so a parse that crashes the thread is known by its hash. */
  | { type: 'hashed'; hash: string }
  | { type: 'unchanged'; hash: string; dirId: string | undefined }
  | { type: 'invalid'; hash: string | undefined; dirId: string | undefined; problems: ConfigProblem[] }
  /** notes: overlay entries whose path the domain does not have. */
  | { type: 'valid'; hash: string; dirId: string | undefined; domains: number; slices: number; notes: string[] }
  /** spec is missing when the thread holds no such slice (it was restarted in between). */
  | { type: 'slice'; index: number; spec: DomainSpec | undefined };

/** Descriptors and limits per slice: each costs the main thread a few milliseconds to copy and compile. */
const SLICE_WEIGHT = 1000;

let slices: DomainSpec[] = [];

function answer(req: ReaderRequest, post: (reply: ReaderReply) => void): void {
  if (req.type === 'slice') {
    post({ type: 'slice', index: req.index, spec: slices[req.index] });
    if (req.index === slices.length - 1) slices = [];
    return;
  }
  slices = [];
  const { origin } = req;
  const dirId = origin.kind === 'dir' ? directoryId(origin.dir) : undefined;
  let hash: string | undefined;
  const missed: OverlayEntry[] = [];
  try {
    const sources = readOrigin(origin, req.limits, missed);
    hash = origin.kind === 'dir' ? hashSources(sources) : hashSources(sources, (f) => f);
    if (req.skip.includes(hash)) {
      post({ type: 'unchanged', hash, dirId });
      return;
    }
    post({ type: 'hashed', hash });
    const specs = validateSources(sources, req.limits.mergeDomains);
    if (req.limits.calendarMonths) calendarMonths(specs);
    slices = sliceSpecs(specs, SLICE_WEIGHT);
    post({ type: 'valid', hash, dirId, domains: specs.length, slices: slices.length, notes: missed.slice(0, 50).map(missedNote) });
  } catch (err) {
    const where = origin.kind === 'dir' ? origin.dir : 'xDS response';
    const problems = err instanceof ConfigError ? err.problems : [fileProblem(where, 'INTERNAL', `cannot load: ${String(err)}`)];
    // An overlay's problems keep their lines: the overlay is a file someone wrote.
    const overlayFile = origin.kind === 'xds' ? origin.overlay?.file : undefined;
    post({ type: 'invalid', hash, dirId, problems: origin.kind === 'xds' ? problems.map((p) => (p.file === overlayFile ? p : unplaced(p))) : problems });
  }
}

function readOrigin(origin: ConfigOrigin, limits: ConfigLimits, missed: OverlayEntry[]): ConfigSource[] {
  if (origin.kind === 'dir') return readConfigSources(origin.dir, limits);
  const overlay = origin.overlay && parseOverlay(origin.overlay.file, origin.overlay.text);
  return xdsSources(origin.resources, limits, overlay, missed);
}

/** A resource's YAML is made here, not written by anyone: its lines mean nothing to the reader, the key path does. */
function unplaced(p: ConfigProblem): ConfigProblem {
  return { ...p, line: 0, column: 0 };
}

/** Which directory is behind the path: a new one (deleted and recreated) needs a new fs.watch. */
function directoryId(dir: string): string | undefined {
  try {
    const st = statSync(dir);
    return `${st.dev}:${st.ino}`;
  } catch {
    return undefined; // reported by the read that follows
  }
}

/** Parsing competes with decisions for the CPU on a small machine: let the scheduler favour the main
 * thread. Linux only (/proc/thread-self names this thread, and a thread's id sets its own priority). */
function yieldCpuToDecisions(): void {
  try {
    setPriority(Number(readlinkSync('/proc/thread-self').split('/').pop()), 10);
  } catch {
    // elsewhere: same priority as the main thread
  }
}

const port = parentPort;
if (port) yieldCpuToDecisions();
port?.on('message', (req: ReaderRequest) => answer(req, (reply) => port.postMessage(reply)));
