import type { Server as HttpServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import type * as grpc from '@grpc/grpc-js';
import { ListenError } from '../errors.js';

/** Binding the service's ports; a port that cannot be had is a ListenError that names the address, the cause
 * and the flag and variable that set it. */

/** Where to listen, and for the error message what it is and the flags and variables that set it. */
export interface ListenAddress {
  host: string;
  port: number;
  what: string;
  setBy: string;
}

export function bindGrpc(server: grpc.Server, at: ListenAddress, credentials: grpc.ServerCredentials): Promise<number> {
  return new Promise((resolve, reject) => {
    server.bindAsync(`${at.host}:${at.port}`, credentials, (err, bound) => {
      // grpc-js reports the listen error only inside its message: "… errors: [listen EADDRINUSE: …]".
      const code = err && (/\b(E[A-Z]+)\b/.exec(err.message)?.[1] ?? 'EIO');
      if (err) reject(new ListenError(listenMessage(at, code!)));
      else resolve(bound);
    });
  });
}

export function listen(server: HttpServer, at: ListenAddress): Promise<number> {
  return new Promise((resolve, reject) => {
    const fail = (err: NodeJS.ErrnoException): void => reject(new ListenError(listenMessage(at, err.code ?? 'EIO')));
    server.once('error', fail);
    server.listen(at.port, at.host, () => {
      server.off('error', fail);
      resolve((server.address() as AddressInfo).port);
    });
  });
}

const LISTEN_CAUSES: Record<string, string> = {
  EADDRINUSE: 'the port is already in use',
  EACCES: 'permission denied (ports below 1024 need privileges)',
  EADDRNOTAVAIL: "the address is not one of this machine's",
  ENOTFOUND: 'the host name does not resolve',
};

/** "cannot listen for gRPC on 0.0.0.0:8081: the port is already in use (set --grpc-port or GRPC_PORT, …)". */
function listenMessage(at: ListenAddress, code: string): string {
  return `cannot listen for ${at.what} on ${at.host}:${at.port}: ${LISTEN_CAUSES[code] ?? code} (set ${at.setBy})`;
}
