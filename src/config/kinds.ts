import type { LimitKind } from './spec.js';

/** The kinds of limit, as a compiled limit, a CounterCheck and check-and-incr.lua's shapes carry them: a small
 * number each, so picking one is an array index (src/limits/kinds/index.ts holds them in this order). */
export type KindCode = 0 | 1 | 2 | 3;
// Annotated, so an object literal keeps the code's type instead of widening it to number.
export const FIXED: 0 = 0;
export const SLIDING: 1 = 1;
export const BUCKET: 2 = 2;
export const SLOTS: 3 = 3;

/** The code of each kind a config names: computed once per limit at load (compile.ts). */
export const KIND_CODES: Readonly<Record<LimitKind, KindCode>> = { fixed_window: FIXED, sliding_window: SLIDING, token_bucket: BUCKET, in_flight: SLOTS };
