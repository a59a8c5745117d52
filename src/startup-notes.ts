import * as grpc from '@grpc/grpc-js';
import type { Logger } from 'pino';
import type { CompiledConfig } from './config/compiled.js';
import type { Servers } from './servers.js';
import { SETTING_HINTS } from './settings/compat.js';
import type { Settings } from './settings/settings.js';
import type { Store } from './store/store.js';
import { VERSION } from './version.js';
import { isWorker } from './workers.js';

/** What libraries and the settings have to say at start, said once, in the log: never a raw line on stderr. */

/** grpc-js writes its own errors to stderr ("E No address added…"), which Tollgate reports itself, once; and
 * what the settings say about envoyproxy/ratelimit's variables is logged (by the primary under --workers). */
export function quietLibraries(settings: Settings, logger: Logger): void {
  grpc.setLogger({ error: (...a: unknown[]) => logger.debug({ grpc: a.join(' ') }, 'grpc-js'), info: () => {}, debug: () => {} });
  dropIpServerNameWarning();
  if (!isWorker()) logSettingNotes(settings, logger);
}

let dropping = false;

/** grpc-js hands Node's TLS the host of the address it connects to as the server name (SNI) even when it is
 * an IP address (an xDS server at 10.0.0.7:18001), which RFC 6066 forbids: Node then sends no name, which is
 * right, and writes a DeprecationWarning (DEP0123) to stderr, outside the log. The certificate is still checked
 * against the address (or CONFIG_GRPC_XDS_SERVER_TLS_SAN). That warning alone is dropped; others go through. */
function dropIpServerNameWarning(): void {
  if (dropping) return;
  dropping = true;
  const emit = process.emitWarning.bind(process) as (...args: unknown[]) => void;
  process.emitWarning = ((warning: unknown, ...rest: unknown[]) => {
    const code = typeof rest[0] === 'object' && rest[0] !== null ? (rest[0] as { code?: unknown }).code : rest[1];
    if (code === 'DEP0123') return;
    emit(warning, ...rest);
  }) as typeof process.emitWarning;
}

/** Once per start: the store chosen by envoyproxy/ratelimit's Redis variables (one info line), and its
 * variables that are set but not acted on (one line: a warning when one of them would change something
 * there). Names only, never values: REDIS_URL and REDIS_AUTH may hold passwords. */
export function logSettingNotes(settings: Settings, logger: Pick<Logger, 'info' | 'warn'>): void {
  if (settings.storeInferredFrom) {
    logger.info(
      { store: 'redis', from: settings.storeInferredFrom },
      `store: redis, since ${settings.storeInferredFrom.join(', ')} ${settings.storeInferredFrom.length > 1 ? 'are' : 'is'} set and BACKEND_TYPE is ` +
        `not (envoyproxy/ratelimit's default backend); --store memory to keep counters in this process`,
    );
  }
  const named = (names: string[]): string => names.map((n) => (SETTING_HINTS[n] ? `${n} (${SETTING_HINTS[n]})` : n)).join(', ');
  const unneeded =
    settings.unneeded.length > 0
      ? `not needed (set to what Tollgate does anyway${settings.xdsServers.length > 0 ? ', or a config directory, which xDS replaces' : ''}): ` +
        settings.unneeded.join(', ')
      : '';
  if (settings.unsupported.length > 0) {
    logger.warn(
      { settings: settings.unsupported, ...(unneeded && { unneeded: settings.unneeded }) },
      `envoyproxy/ratelimit settings Tollgate does not support are ignored: ${named(settings.unsupported)}${unneeded && `; ${unneeded}`}`,
    );
  } else if (unneeded) {
    logger.info({ unneeded: settings.unneeded }, `envoyproxy/ratelimit settings ${unneeded}`);
  }
}

/** The one line that says the service is up: where it listens and what it serves with (names, never values). */
export function logServing(
  logger: Logger,
  settings: Settings,
  p: { servers: Servers; store: Store; config: CompiledConfig; adminApi: boolean; sharedTiers: boolean },
): void {
  const { grpcPort, grpcPlaintextPort, httpPort, adminPort, prometheusPort } = p.servers;
  logger.info(
    {
      version: VERSION,
      ...(isWorker() && { worker: process.pid }),
      ...{ grpcPort, grpcPlaintextPort, httpPort, adminPort, prometheusPort },
      store: p.store.kind,
      configSource: configSourceName(settings),
      configHash: p.config.hash,
      domains: [...p.config.domains.keys()],
      shadowMode: settings.shadowMode,
      ...(settings.store === 'redis' &&
        settings.redisBatch.windowMs > 0 && { redisBatchWindowMs: settings.redisBatch.windowMs, redisBatchLimit: settings.redisBatch.limit }),
      adminApi: p.adminApi,
      sharedTiers: p.sharedTiers,
    },
    'tollgate serving',
  );
}

/** file, xds, or both (xds+file), as logged at start. */
function configSourceName(settings: Settings): string {
  return [...(settings.xdsServers.length > 0 ? ['xds'] : []), ...(settings.fromDir ? ['file'] : [])].join('+');
}
