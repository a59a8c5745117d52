import { inspectCommand, tiersCommand } from './admin.js';
import { checkConfigCommand } from './check-config.js';
import type { Command } from './command.js';
import { fingerprintCommand } from './fingerprint.js';
import { serveCommand } from './serve.js';
import { explainCommand, simulateCommand } from './tuning.js';

export type { Command } from './command.js';

/** Every command of `tollgate`, by name: cli.ts dispatches through this table and nothing else. */
export const COMMANDS: Record<string, Command> = {
  serve: serveCommand,
  'check-config': checkConfigCommand,
  fingerprint: fingerprintCommand,
  tiers: tiersCommand,
  inspect: inspectCommand,
  simulate: simulateCommand,
  explain: explainCommand,
};
