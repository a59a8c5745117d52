import { Cluster, type ClusterOptions, Redis, type RedisOptions, ReplyError } from 'ioredis';
import { StoreConnectionError, StoreMovingError, StoreUnavailableError } from '../errors.js';
import { keepSocketErrorsHeard } from './socket-errors.js';
import { TimeoutError } from './timeout.js';

export type RedisType = 'single' | 'sentinel' | 'cluster';

/** Where and how to reach Redis, parsed from one URL:
 *   redis[s]://[user[:password]@]host[:port][,host[:port]…][/db | /master-name]
 * single: one host, optional /db. sentinel: the sentinels, and the master's name as the path.
 * cluster: any number of seed nodes. rediss:// turns TLS on. */
export interface RedisConnection {
  type: RedisType;
  nodes: { host: string; port: number }[];
  username: string | undefined;
  password: string | undefined;
  tls: boolean;
  db: number;
  masterName: string | undefined;
  /** With TLS: a client certificate, CAs, no hostname check (settings/tls.ts reads them). */
  tlsFiles?: RedisTlsFiles | undefined;
}

/** envoyproxy/ratelimit's REDIS_TLS_CLIENT_CERT, _KEY, REDIS_TLS_CACERT and REDIS_TLS_SKIP_HOSTNAME_VERIFICATION,
 * read once at start (as there: a rotated client certificate is used after a restart). */
export interface RedisTlsFiles {
  cert: Buffer | undefined;
  key: Buffer | undefined;
  /** The system's roots and the CA file, PEM. */
  ca: string[] | undefined;
  /** The chain is still checked, the name in the certificate is not (its src/utils/tls.go does the same). */
  skipHostnameVerification: boolean;
}

/** ioredis's `tls` option: Node's tls.connect options. */
function tlsOptions(conn: RedisConnection): Record<string, unknown> | undefined {
  if (!conn.tls) return undefined;
  const f = conn.tlsFiles;
  if (!f) return {};
  return {
    ...(f.cert && { cert: f.cert, key: f.key }),
    ...(f.ca && { ca: f.ca }),
    ...(f.skipHostnameVerification && { checkServerIdentity: () => undefined }),
  };
}

export class RedisUrlError extends Error {
  override readonly name = 'RedisUrlError';
}

const URL_SHAPE = /^(rediss?):\/\/(?:([^@/]*)@)?([^/]+)(?:\/(.*))?$/;

/** Parses the URL. Errors describe the problem without echoing the URL (it may hold a password). */
export function parseRedisUrl(url: string, type: RedisType): RedisConnection {
  const m = URL_SHAPE.exec(url.trim());
  if (!m) throw new RedisUrlError('the Redis URL must look like redis://[user:password@]host:port[,host:port…][/db or /master-name]');
  const [, scheme, auth, hosts, path] = m;
  const [user, ...rest] = auth ? auth.split(':') : [];
  const nodes = hosts!.split(',').map((hp) => {
    const at = hp.lastIndexOf(':');
    const host = at > 0 ? hp.slice(0, at) : hp;
    const port = at > 0 ? Number(hp.slice(at + 1)) : type === 'sentinel' ? 26379 : 6379;
    if (!host || !Number.isInteger(port) || port <= 0 || port > 65535) throw new RedisUrlError(`bad host:port in the Redis URL (node ${host || '?'})`);
    return { host: host.replace(/^\[|\]$/g, ''), port };
  });
  const conn: RedisConnection = {
    type,
    nodes,
    username: user ? decodeURIComponent(user) : undefined,
    password: rest.length ? decodeURIComponent(rest.join(':')) : undefined,
    tls: scheme === 'rediss',
    db: 0,
    masterName: undefined,
  };
  if (type === 'sentinel') {
    if (!path) throw new RedisUrlError('sentinel mode needs the master name as the URL path: redis://sentinel1:26379,sentinel2:26379/mymaster');
    conn.masterName = decodeURIComponent(path);
  } else if (path) {
    if (type === 'cluster') throw new RedisUrlError('Redis Cluster has no databases: drop the /path from the URL');
    conn.db = Number(path);
    if (!Number.isInteger(conn.db) || conn.db < 0) throw new RedisUrlError('the path of a single Redis URL is a database number');
  }
  if (type === 'single' && nodes.length !== 1) throw new RedisUrlError('single mode takes one host; use --redis-type cluster or sentinel for several');
  return conn;
}

/** Where a connection goes, for log lines: host:port of each node, never the credentials. */
export function redisAddress(conn: RedisConnection): string {
  return conn.nodes.map((n) => `${n.host}:${n.port}`).join(',');
}

export interface ClientOptions {
  commandTimeoutMs: number;
  sentinelPassword: string | undefined;
}

/** Reconnect quickly at first, then back off to at most 2 s between attempts, forever. */
const retryStrategy = (times: number): number => Math.min(50 * 2 ** Math.min(times, 6), 2000);

/** An ioredis client that never queues commands while disconnected (they fail at once, so decisions stay
 * fast) and batches concurrent commands into one write (auto-pipelining). */
export function createClient(conn: RedisConnection, opts: ClientOptions): Redis | Cluster {
  keepSocketErrorsHeard();
  const perNode = {
    username: conn.username,
    password: conn.password,
    tls: tlsOptions(conn),
    // No ioredis commandTimeout: its timer would declare replies late that are already in the socket buffer
    // (see withTimeout); the store bounds every call itself.
    connectTimeout: Math.max(1000, opts.commandTimeoutMs * 20),
    maxRetriesPerRequest: 0,
  };
  // The store batches its script calls itself; auto-pipelining EVALSHA would group Cluster commands by their
  // first argument (the script's hash), not by key, and send commands for several nodes as one batch.
  const autoPipeliningIgnoredCommands = ['evalsha', 'eval'];
  const common: RedisOptions = { ...perNode, enableAutoPipelining: true, autoPipeliningIgnoredCommands, enableOfflineQueue: false, retryStrategy };
  if (conn.type === 'cluster') {
    const clusterOpts: ClusterOptions = {
      enableOfflineQueue: false,
      enableAutoPipelining: true,
      autoPipeliningIgnoredCommands,
      clusterRetryStrategy: retryStrategy,
      slotsRefreshTimeout: Math.max(1000, opts.commandTimeoutMs * 20),
      // No command sent again on ioredis's own timers (CLUSTERDOWN, a closed connection: 100 ms each, 16 times by
      // default): one re-sent after its caller gave up would take a slot after its give-back, held for its
      // lease. Such errors come back at once; the store sends again itself, within its timeout (StoreMovingError).
      retryDelayOnClusterDown: 0,
      retryDelayOnFailover: 0,
      retryDelayOnTryAgain: 10,
      maxRedirections: 4,
      redisOptions: perNode,
    };
    return new Cluster(conn.nodes, clusterOpts);
  }
  if (conn.type === 'sentinel') {
    return new Redis({
      ...common,
      sentinels: conn.nodes,
      name: conn.masterName,
      sentinelPassword: opts.sentinelPassword,
      sentinelRetryStrategy: retryStrategy,
    });
  }
  return new Redis({ ...common, host: conn.nodes[0]!.host, port: conn.nodes[0]!.port, db: conn.db });
}

/** What a failed Redis call was, by the error's class: our deadline (TimeoutError) or an error reply from
 * Redis means Redis is there but could not answer; anything else means ioredis had no usable connection (it
 * says so with plain errors: closed, not writable, cluster not ready, or the socket's own: ECONNREFUSED…).
 * The counter store and the tier store both classify through here. */
export function redisFailure(err: unknown): StoreUnavailableError {
  const message = `redis: ${(err as Error).message}`;
  // A Cluster failing over or moving a slot refused the command before it ran (redirects past maxRedirections).
  if (/^(CLUSTERDOWN|TRYAGAIN|MOVED|ASK)\b|^Too many Cluster redirections/.test((err as Error).message ?? '')) return new StoreMovingError();
  if (err instanceof TimeoutError || err instanceof ReplyError) return new StoreUnavailableError(message, { cause: err });
  return new StoreConnectionError(message, { cause: err });
}
