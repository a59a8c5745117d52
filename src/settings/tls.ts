import { readFileSync } from 'node:fs';
import { rootCertificates } from 'node:tls';
import * as grpc from '@grpc/grpc-js';
import type { GrpcTlsFiles } from '../server/tls.js';
import type { RedisTlsFiles } from '../store/redis-connection.js';
import { parseBool, SettingsError } from './compat.js';
import type { OptionName, Setting } from './table.js';

/** The TLS files of the service's three connections, by envoyproxy/ratelimit's variables (its
 * src/settings/settings.go and src/utils/tls.go): the gRPC port's, the xDS client's and the Redis client's.
 * Each file is read now, so one that is missing stops the start naming its variable, never later. */

type Reader = (name: OptionName) => Setting;

/** The gRPC port's TLS files. The client CA is GRPC_CLIENT_TLS_CACERT, or GRPC_SERVER_TLS_CA_CERT, the name
 * Envoy Gateway sets (its internal/infrastructure/kubernetes/ratelimit/resource.go) and envoyproxy/ratelimit
 * does not read: with it, only Envoy (whose certificate Envoy Gateway signs with that CA) may ask. */
export function grpcTlsFiles(setting: Reader): GrpcTlsFiles {
  const file = (name: OptionName, required: boolean): string | undefined => {
    const s = setting(name);
    if (s.value === '') {
      if (required) throw new SettingsError(`${setting('grpc-tls').from} needs ${s.from}`);
      return undefined;
    }
    readable(s);
    return s.value;
  };
  const clientCa = file('grpc-tls-client-ca', false);
  return { cert: file('grpc-tls-cert', true)!, key: file('grpc-tls-key', true)!, clientCa, clientCaFrom: setting('grpc-tls-client-ca').from };
}

export function readable(s: Setting): Buffer {
  try {
    return readFileSync(s.value);
  } catch (err) {
    throw new SettingsError(`${s.from}: cannot read the file (${(err as NodeJS.ErrnoException).code ?? 'EIO'})`);
  }
}

/** TLS to the management server: its certificate checked against the CA file (or the system's CAs), and a
 * client certificate when both halves are given (mTLS). */
export function xdsCredentials(setting: Reader): grpc.ChannelCredentials {
  const file = (name: OptionName): Buffer | null => (setting(name).value === '' ? null : readable(setting(name)));
  const [cert, key] = [file('xds-tls-cert'), file('xds-tls-key')];
  if ((cert === null) !== (key === null))
    throw new SettingsError(`${setting('xds-tls-cert').from} and ${setting('xds-tls-key').from} go together: set both for mTLS, or neither`);
  try {
    return grpc.credentials.createSsl(file('xds-tls-cacert'), key, cert);
  } catch (err) {
    throw new SettingsError(`the xDS TLS files cannot be used: ${(err as Error).message}`);
  }
}

/** REDIS_TLS_CLIENT_CERT and _KEY (a client certificate, as Envoy Gateway's Redis TLS variant mounts them),
 * REDIS_TLS_CACERT and REDIS_TLS_SKIP_HOSTNAME_VERIFICATION, read when the connection is TLS, as
 * envoyproxy/ratelimit's RedisTlsConfig reads them. Set beside a connection without TLS they would do nothing,
 * so that is refused rather than left to look like mutual TLS. Undefined when none is set. */
export function redisTlsFiles(setting: Reader, tls: boolean, tlsSetBy: string): RedisTlsFiles | undefined {
  const names: OptionName[] = ['redis-tls-cert', 'redis-tls-key', 'redis-tls-cacert'];
  const skip = setting('redis-tls-skip-hostname-verification');
  const skipHostname = parseBool(skip.value, skip.from);
  const set = names.filter((n) => setting(n).value !== '');
  if (set.length === 0 && !skipHostname) return undefined;
  if (!tls) {
    const what = [...set.map((n) => setting(n).from), ...(skipHostname ? [skip.from] : [])].join(', ');
    throw new SettingsError(`${what} set, but the connection to Redis is not TLS: set ${tlsSetBy}`);
  }
  const file = (name: OptionName): Buffer | undefined => (setting(name).value === '' ? undefined : readable(setting(name)));
  const [cert, key, ca] = names.map(file);
  if ((cert === undefined) !== (key === undefined))
    throw new SettingsError(`${setting('redis-tls-cert').from} and ${setting('redis-tls-key').from} go together: set both, or neither`);
  // Go's TlsConfigFromFiles adds the CA to the system's pool; Node's `ca` replaces its bundled roots, so
  // they are given back beside it.
  return { cert, key, ca: ca && [...rootCertificates, ca.toString()], skipHostnameVerification: skipHostname };
}
