/** The in-flight half of the port's soak (port-round.ts, issue 59): a well-behaved client taking and giving back
 * slots by request id each round, a never-used tenant's first take after each round (an attacker inventing
 * tenants must not lock anyone out), the 300 ms stop of the service that envoyTimeouts' resets meet, and the end of
 * the run's check that no slot a well-behaved client gave back is still held. */
import { RlsClient, type RlsRequest, type RlsResponse } from '../helpers/service.js';
import { caseRng } from './fuzz-lib.js';
import { INFLIGHT_DOMAIN, TENANT_LIMIT } from './inflight-attacks.mjs';
import { RLQS_DOMAIN } from './rlqs-judge.js';
import type { RoundContext } from './soak-lib.js';

const domain = INFLIGHT_DOMAIN;
const limit = TENANT_LIMIT;
const STALL_MS = 300;

type Descriptor = RlsRequest['descriptors'][number];
const slot = (tenant: string, id: string, hits: number, negative = false): Descriptor => ({
  entries: [
    { key: 'tenant', value: tenant },
    { key: 'request_id', value: id },
  ],
  hits_addend: { value: hits },
  ...(negative && { is_negative_hits: true }),
});

/** Undefined when every status is OK (and, given `remaining`, has that many left), else what is wrong. */
function notOk(what: string, a: RlsResponse, remaining?: number): string | undefined {
  const bad = a.statuses.findIndex((s) => s.code !== 'OK' || (remaining !== undefined && s.limit_remaining !== remaining));
  if (a.overall_code === 'OK' && bad === -1) return undefined;
  const s = a.statuses[Math.max(bad, 0)];
  const expected = remaining === undefined ? '' : `, expected OK with ${remaining}`;
  return `${what}: ${a.overall_code}, status ${bad} of ${a.statuses.length}: ${s?.code} with ${s?.limit_remaining} left${expected}`;
}

/** Envoy's pair for each request, one request at a time on the round's own tenant (recorded in `tenants` for the
 * end of the run): a take by a fresh id (its first slot: OK, limit − 1 left), the same take again (a retry: OK, no
 * second slot), then the id's give-back. Paced like the reservations beside it. */
export async function wellBehaved(ctx: RoundContext, tenants: string[]): Promise<void> {
  const tenant = `good-${ctx.marker}-${ctx.index}`;
  tenants.push(tenant);
  const rls = new RlsClient(ctx.target.grpcPort, { 'grpc.tollgate.inflight': ctx.index });
  const until = Date.now() + ctx.ms;
  const call = (d: Descriptor) => rls.call({ domain, descriptors: [d] }, 5000);
  try {
    for (let k = 0; Date.now() < until; k++) {
      const id = `${ctx.marker}-${k}`;
      const problem =
        notOk(`take ${k}`, await call(slot(tenant, id, 1)), limit - 1) ??
        notOk(`take ${k} again`, await call(slot(tenant, id, 1)), limit - 1) ??
        notOk(`give-back ${k}`, await call(slot(tenant, id, 1, true)));
      if (problem) throw new Error(problem);
      ctx.count('in-flight take and give-back');
      await new Promise((res) => setTimeout(res, 20));
    }
  } catch (err) {
    ctx.wrong.add({ index: ctx.index, kind: 'in-flight (well-behaved)', problem: (err as Error).message });
  } finally {
    rls.close();
  }
}

/** A tenant whose first take is refused is locked out: after any round, one never used is admitted (and gives
 * its slot back). Undefined when it was, else what it was answered. */
export async function freshTenant(rls: RlsClient, tenant: string): Promise<string | undefined> {
  const take = await rls.call({ domain, descriptors: [slot(tenant, 'first', 1)] }, 5000);
  await rls.call({ domain, descriptors: [slot(tenant, 'first', 1, true)] }, 5000);
  return notOk(`a never-used tenant's first take`, take, limit - 1);
}

/** Stops the service (SIGSTOP) for 300 ms a little into the round, as a replica's GC pause or a throttled
 * container would, then checks that a call made after it is answered. Undefined when it was. */
export async function stallOnce(ctx: RoundContext): Promise<string | undefined> {
  const rls = new RlsClient(ctx.target.grpcPort, { 'grpc.tollgate.stall': ctx.index });
  const r = caseRng(ctx.r.int(2 ** 32), 2);
  const probe = (n: string) => rls.call({ domain: RLQS_DOMAIN, descriptors: [{ entries: [{ key: 'probe', value: n }] }] }, 2000);
  try {
    await probe(`before-stall-${ctx.marker}-${ctx.index}`);
    await new Promise((res) => setTimeout(res, r.between(Math.floor(ctx.ms * 0.3), Math.floor(ctx.ms * 0.5))));
    process.kill(ctx.target.pid, 'SIGSTOP');
    try {
      await new Promise((res) => setTimeout(res, STALL_MS));
    } finally {
      process.kill(ctx.target.pid, 'SIGCONT');
    }
    ctx.count('service stopped 300 ms');
    const after = await probe(`after-stall-${ctx.marker}-${ctx.index}`);
    return after.overall_code === 'OK' ? undefined : `the first call after the stall: ${after.overall_code}`;
  } catch (err) {
    return `around the stall: ${(err as Error).message}`;
  } finally {
    rls.close();
  }
}

/** After the last round: each well-behaved tenant gave back every slot it took, so it has its whole limit (limit
 * fresh ids in one call, all OK, then given back), and so has a tenant never used. The problems, one a tenant. */
export async function stuckSlots(rls: RlsClient, tenants: readonly string[], tag: string): Promise<string[]> {
  const problems: string[] = [];
  for (const tenant of [...tenants, `fresh-${tag}`]) {
    const ids = Array.from({ length: limit }, (_, i) => `stuck-check-${i}`);
    try {
      const take = await rls.call({ domain, descriptors: ids.map((id) => slot(tenant, id, 1)) }, 5000);
      await rls.call({ domain, descriptors: ids.map((id) => slot(tenant, id, 1, true)) }, 5000);
      const problem = notOk(`${tenant}: ${limit} takes at the end of the run`, take);
      if (problem) problems.push(problem);
    } catch (err) {
      problems.push(`${tenant}: ${(err as Error).message}`);
    }
  }
  return problems;
}
