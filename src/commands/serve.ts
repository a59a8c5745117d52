import type { Logger } from 'pino';
import { ConfigError } from '../config/errors.js';
import { ListenError } from '../errors.js';
import { LogSink } from '../log-sink.js';
import { createLogger } from '../logger.js';
import type { Metrics } from '../metrics/metrics.js';
import { guardProcess } from '../process-guard.js';
import { logSettingNotes, startService } from '../service.js';
import { parseServeArgs, SERVE_OPTIONS, serveHelp } from '../settings/settings.js';
import { isWorker, runPrimary } from '../workers.js';
import type { Command } from './command.js';

/** How long a start that failed waits for its log lines to leave before exiting 1. */
const START_FAILURE_FLUSH_MS = 1000;

/** `tollgate serve`: runs the service until SIGTERM or SIGINT, then stops it gracefully. */
export const serveCommand: Command = {
  help: serveHelp,
  // Every setting is a string flag (parseServeArgs): the environment and the default stand behind it.
  options: Object.fromEntries(Object.keys(SERVE_OPTIONS).map((k) => [k, { type: 'string' }])),
  run: serve,
};

async function serve(args: string[]): Promise<number> {
  const settings = parseServeArgs(args);
  const sink = new LogSink();
  const logger = createLogger(settings.logLevel, settings.logFormat, sink);
  const counted = guard(logger, sink);
  if (settings.workers > 1 && !isWorker()) {
    logSettingNotes(settings, logger); // once, not once per worker (a worker does not log them)
    return runPrimary(settings.workers, logger);
  }
  const whenUp = signals();
  let service: Awaited<ReturnType<typeof startService>>;
  try {
    service = await startService(settings, { logger });
  } catch (err) {
    if (err instanceof ConfigError) {
      logger.fatal({ problems: err.problems }, 'descriptor config is invalid');
      process.stderr.write(`${err.message}\n`);
      await sink.flush(START_FAILURE_FLUSH_MS);
      return 1;
    }
    if (err instanceof ListenError) {
      logger.fatal({ err: err.message }, 'cannot start');
      process.stderr.write(`tollgate: ${err.message}\n`);
      await sink.flush(START_FAILURE_FLUSH_MS);
      return 1;
    }
    throw err;
  }
  const running = service;
  counted(running.metrics);
  let stopping = false;
  const stop = (signal: string): void => {
    if (stopping) return;
    stopping = true;
    const deadline = Date.now() + settings.shutdownTimeoutMs;
    logger.info({ signal }, 'shutting down');
    // Log lines still queued (a slow or stuck reader) get what is left of the shutdown timeout, and no more:
    // a log reader that is gone or stuck never holds the exit past it.
    const exit = (code: number): void => void sink.flush(deadline - Date.now()).then(() => process.exit(Math.max(code, Number(process.exitCode ?? 0))));
    running.stop().then(
      () => exit(0),
      (err: unknown) => {
        logger.error({ err }, 'shutdown failed');
        exit(1);
      },
    );
  };
  whenUp(stop);
  return new Promise<number>(() => {});
}

/** The process guard (process-guard.ts), from the start (a stray rejection while Redis or xDS come up too) and
 * in a --workers primary. Returns what to call once the metrics exist: rejections are counted from then, and
 * those before. */
function guard(logger: Logger, sink: LogSink): (metrics: Metrics) => void {
  let before = 0;
  let count = (): void => void before++;
  const crash = (code: number): void => {
    process.exitCode = code; // a shutdown racing the log line's flush still exits with it
    void sink.flush(START_FAILURE_FLUSH_MS).then(() => process.exit(code));
  };
  guardProcess(logger, { unhandled: () => count(), exit: crash });
  return (metrics) => {
    metrics.unhandledRejections.inc(before);
    count = () => metrics.unhandledRejections.inc();
  };
}

/** SIGTERM and SIGINT, listened for from before the service starts: one that comes while it starts (its
 * "serving" line already written, or not) stops it as soon as it is up. Listened for only once it was up, such a
 * signal found no listener and ended the process by its default action, with no exit code (seen in CI: a
 * SIGTERM sent on the "serving" line). Returns what to call with the service's stop once it is up. */
export function signals(target: Pick<NodeJS.EventEmitter, 'on'> = process): (stop: (signal: string) => void) => void {
  let handler: ((signal: string) => void) | undefined;
  let early: string | undefined;
  const on = (signal: string): void => {
    if (handler) handler(signal);
    else early ??= signal;
  };
  target.on('SIGTERM', () => on('SIGTERM'));
  target.on('SIGINT', () => on('SIGINT'));
  return (stop) => {
    handler = stop;
    if (early) stop(early);
  };
}
