import { ConfigError } from '../config/errors.js';
import { ListenError } from '../errors.js';
import { createLogger } from '../logger.js';
import { logSettingNotes, startService } from '../service.js';
import { parseServeArgs, SERVE_OPTIONS, serveHelp } from '../settings.js';
import { isWorker, runPrimary } from '../workers.js';
import type { Command } from './command.js';

/** `tollgate serve`: runs the service until SIGTERM or SIGINT, then stops it gracefully. */
export const serveCommand: Command = {
  help: serveHelp,
  // Every setting is a string flag (parseServeArgs): the environment and the default stand behind it.
  options: Object.fromEntries(Object.keys(SERVE_OPTIONS).map((k) => [k, { type: 'string' }])),
  run: serve,
};

async function serve(args: string[]): Promise<number> {
  const settings = parseServeArgs(args);
  const logger = createLogger(settings.logLevel, settings.logFormat);
  if (settings.workers > 1 && !isWorker()) {
    logSettingNotes(settings, logger); // once, not once per worker (a worker does not log them)
    return runPrimary(settings.workers, logger);
  }
  let service: Awaited<ReturnType<typeof startService>>;
  try {
    service = await startService(settings, { logger });
  } catch (err) {
    if (err instanceof ConfigError) {
      logger.fatal({ problems: err.problems }, 'descriptor config is invalid');
      process.stderr.write(`${err.message}\n`);
      return 1;
    }
    if (err instanceof ListenError) {
      logger.fatal({ err: err.message }, 'cannot start');
      process.stderr.write(`tollgate: ${err.message}\n`);
      return 1;
    }
    throw err;
  }
  const running = service;
  let stopping = false;
  const stop = (signal: string): void => {
    if (stopping) return;
    stopping = true;
    logger.info({ signal }, 'shutting down');
    running.stop().then(
      () => process.exit(0),
      (err: unknown) => {
        logger.error({ err }, 'shutdown failed');
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
  return new Promise<number>(() => {});
}
