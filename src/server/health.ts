import type * as grpc from '@grpc/grpc-js';

export const ServingStatus = { UNKNOWN: 0, SERVING: 1, NOT_SERVING: 2, SERVICE_UNKNOWN: 3 } as const;
type Status = (typeof ServingStatus)[keyof typeof ServingStatus];

/** grpc.health.v1.Health: one status for the server ('') and the RLS service, with Watch streams. */
export class HealthService {
  private status: Status = ServingStatus.NOT_SERVING;
  private readonly watchers = new Set<grpc.ServerWritableStream<{ service: string }, { status: number }>>();
  constructor(private readonly services: readonly string[]) {}

  /** A Watch stream is told only of a change, as grpc.health.v1 says ("whenever the service's serving status
   * changes"), however often this is called. */
  set(serving: boolean): void {
    const next = serving ? ServingStatus.SERVING : ServingStatus.NOT_SERVING;
    if (next === this.status) return;
    this.status = next;
    for (const w of this.watchers) w.write({ status: this.statusOf(w.request.service) });
  }

  get serving(): boolean {
    return this.status === ServingStatus.SERVING;
  }

  statusOf(service: string): Status {
    return service === '' || this.services.includes(service) ? this.status : ServingStatus.SERVICE_UNKNOWN;
  }

  handlers(): grpc.UntypedServiceImplementation {
    return {
      Check: (call: grpc.ServerUnaryCall<{ service: string }, unknown>, callback: grpc.sendUnaryData<unknown>) => {
        callback(null, { status: this.statusOf(call.request.service) });
      },
      Watch: (call: grpc.ServerWritableStream<{ service: string }, { status: number }>) => {
        this.watchers.add(call);
        call.write({ status: this.statusOf(call.request.service) });
        call.on('cancelled', () => this.watchers.delete(call));
        call.on('close', () => this.watchers.delete(call));
      },
    };
  }

  /** Ends Watch streams so a shutting-down server has no open calls. */
  endWatches(): void {
    for (const w of this.watchers) w.end();
    this.watchers.clear();
  }
}
