import type { KindCode } from '../check.js';
import type { LimitAlgorithm } from './algorithm.js';
import { fixedWindow } from './fixed-window.js';
import { inFlight } from './in-flight.js';
import { slidingWindow } from './sliding-window.js';
import { tokenBucket } from './token-bucket.js';

/** Every kind of limit, the one place one is registered: its place here is its code, the number a compiled
 * limit and a CounterCheck carry (`kind`) and check-and-incr.lua's shapes name it by (lua/kinds.lua lists the
 * same kinds in the same order; test/unit/kinds-docs.test.ts holds them together). The first is a rule's
 * default. */
const REGISTERED = [fixedWindow, slidingWindow, tokenBucket, inFlight] as const;
export const ALGORITHMS: readonly LimitAlgorithm[] = REGISTERED;

/** A kind's name, as a config gives it. */
export type LimitKind = (typeof REGISTERED)[number]['kind'];
/** A kind's code: its place in ALGORITHMS (defined with the checks that carry it). */
export type { KindCode } from '../check.js';

/** The code of each kind a config names: computed once per limit at load (config/compile.ts). */
export const KIND_CODES = Object.fromEntries(ALGORITHMS.map((a, i) => [a.kind, i])) as Readonly<Record<LimitKind, KindCode>>;

/** The kind of a code, as the store and the limiter look it up for every check. */
export const kindOf = (code: KindCode): LimitAlgorithm => ALGORITHMS[code]!;

/** A rule's kind when its config names none. */
export const DEFAULT_KIND: LimitKind = REGISTERED[0].kind;

/** The kind a descriptor's `in_flight` compiles to: the one that holds slots. */
export const SLOT_KIND: LimitAlgorithm & { kind: LimitKind } = REGISTERED.find((a) => a.slots)!;

/** A kind whose reads bring the previous window's count back (RLQS reads RLS's windows through it). */
export const PREVIOUS_READER: KindCode = ALGORITHMS.findIndex((a) => a.readsPrevious);
