import type { Command } from './command.js';
import { EXPLAIN_HELP, explainCommand as explainRun, SIMULATE_HELP, simulateCommand as simulateRun } from './simulate-explain.js';

/** `tollgate simulate` and `tollgate explain`: the tuning tools (src/tuning/). */
export const simulateCommand: Command = { help: () => SIMULATE_HELP, run: simulateRun };
export const explainCommand: Command = { help: () => EXPLAIN_HELP, run: explainRun };
