import { KIND_CODES } from '../../src/limits/kinds/index.js';

/** The tests' names for the registered kinds' codes (src/limits/kinds/index.ts: a code is a kind's place). */
export type { KindCode } from '../../src/limits/kinds/index.js';
export const FIXED = KIND_CODES.fixed_window;
export const SLIDING = KIND_CODES.sliding_window;
export const BUCKET = KIND_CODES.token_bucket;
export const SLOTS = KIND_CODES.in_flight;
