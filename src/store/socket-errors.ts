import { createRequire } from 'node:module';
import { SentinelConnector } from 'ioredis';

/** ioredis 6 listens for a connection's 'error' with once(), twice (StandaloneConnector.connect and
 * Redis.connect, and SentinelConnector's the same): a socket that emits a second error after both were spent
 * (a TLS handshake refused with an alert, then the socket's own error as it is torn down) has no listener, and an
 * 'error' nobody hears ends the process. A Redis with a bad certificate ended a clean CI run so (round 5, item 12;
 * ioredis PR #961 proposed on() and was not merged). Every socket a connector makes gets one listener more that
 * does nothing: ioredis still hears the errors it listens for; the ones it does not are dropped, not thrown. */

interface Connector {
  connect(...args: unknown[]): Promise<NodeJS.EventEmitter>;
}

const require = createRequire(import.meta.url);
/** Not in ioredis's index: the connector every standalone Redis and every Cluster node uses. */
const { default: StandaloneConnector } = require('ioredis/built/connectors/StandaloneConnector.js') as { default: { prototype: Connector } };

function ignore(): void {}

let patched = false;

export function keepSocketErrorsHeard(): void {
  if (patched) return;
  patched = true;
  for (const proto of [StandaloneConnector.prototype, (SentinelConnector as unknown as { prototype: Connector }).prototype]) {
    const connect = proto.connect;
    proto.connect = async function (this: Connector, ...args: unknown[]) {
      const stream = await connect.apply(this, args);
      stream.on('error', ignore);
      return stream;
    };
  }
}
