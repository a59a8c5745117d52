import type { Command } from './command.js';

export type { Command } from './command.js';

/** Every command of `tollgate`, by name, loaded when it runs: cli.ts dispatches through this table and nothing
 * else. Loaded on demand because `serve` pulls in the whole service (gRPC, Redis, tracing): `tollgate
 * fingerprint` started in 0.46 s with every command loaded and starts in 0.10 s alone (Node 24, this machine). */
export const COMMANDS: Record<string, () => Promise<Command>> = {
  serve: async () => (await import('./serve.js')).serveCommand,
  'check-config': async () => (await import('./check-config.js')).checkConfigCommand,
  fingerprint: async () => (await import('./fingerprint.js')).fingerprintCommand,
  tiers: async () => (await import('./admin.js')).tiersCommand,
  inspect: async () => (await import('./admin.js')).inspectCommand,
  spend: async () => (await import('./spend.js')).spendCommand,
  usage: async () => (await import('./usage.js')).usageCommand,
  simulate: async () => (await import('./tuning.js')).simulateCommand,
  explain: async () => (await import('./tuning.js')).explainCommand,
};

/** Every command, loaded: for the checks that read them all (test/unit/docs-cli.test.ts). */
export async function loadCommands(): Promise<Record<string, Command>> {
  const loaded = await Promise.all(Object.entries(COMMANDS).map(async ([name, load]) => [name, await load()] as const));
  return Object.fromEntries(loaded);
}
