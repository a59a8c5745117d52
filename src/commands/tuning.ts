import type { Command } from './command.js';
import {
  EXPLAIN_HELP,
  EXPLAIN_OPTIONS,
  explainCommand as explainRun,
  SIMULATE_HELP,
  SIMULATE_OPTIONS,
  simulateCommand as simulateRun,
} from './simulate-explain.js';

/** `tollgate simulate` and `tollgate explain`: the tuning tools (src/tuning/). */
export const simulateCommand: Command = { help: () => SIMULATE_HELP, options: SIMULATE_OPTIONS, run: simulateRun };
export const explainCommand: Command = { help: () => EXPLAIN_HELP, options: EXPLAIN_OPTIONS, run: explainRun };
