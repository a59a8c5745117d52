import http2 from 'node:http2';
import { performance } from 'node:perf_hooks';
import { connect, descriptor, GRPC, OK, RLS_PATH, rlsMessage, unary } from './rls-wire.mjs';

/** Round 6's attacks on the gRPC port (issue 59), run by port-attacks.mjs as processes of their own beside round
 * 5's and judged as they go: each problem is reported (a line on stdout, port-round.ts adds it to the round's wrong
 * answers). In-flight takes from invented tenants (the memory store's holder bound makes room from the counters
 * that hold most), count-mode give-backs of 2^32 − 1 (100 slots a descriptor), and an Envoy-like client whose
 * calls are reset at their 50 ms timeout while the harness stops the service for 300 ms (late resets are never
 * counted, src/server/reset-guard.ts). */

/** The fuzz config's in-flight rules (port-fuzz.test.ts writes this file). */
export const INFLIGHT_DOMAIN = 'fuzz-inflight';
export const TENANT_LIMIT = 64;
export const POOL_LIMIT = 1000;
export const INFLIGHT_YAML = `
domain: ${INFLIGHT_DOMAIN}
descriptors:
  - key: tenant
    in_flight: { limit: ${TENANT_LIMIT}, lease: 24h, request_key: request_id }
  - key: pool
    in_flight: { limit: ${POOL_LIMIT}, lease: 24h }
`;

/** Descriptors a call: the request bound (rls/request.ts maxDescriptors). */
const TAKES_PER_CALL = 64;
/** Calls in flight at once on the attacker's connection. */
const WIDTH = 4;
/** RESOURCE_EXHAUSTED: the port's shared byte bound, which another attack of the round (gzip bombs) may hold. */
const REFUSED = '8';
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** `work(session)` on `width` loops over a connection, again on a new one when the server ends it, until aborted. */
async function onConnections(port, signal, address, width, work) {
  while (!signal.aborted) {
    const s = await connect(port, address);
    if (!s) {
      await sleep(50);
      continue;
    }
    const stop = () => s.destroy();
    signal.addEventListener('abort', stop, { once: true });
    const live = () => !signal.aborted && !s.closed && !s.destroyed;
    await Promise.all(Array.from({ length: width }, (_, w) => work(s, live, w)));
    signal.removeEventListener('abort', stop);
    s.destroy();
  }
}

/** Whether a call's answer is `statuses` OK statuses with `remaining` each (from `remaining` to `most`, when
 * given); else reports it. Undefined when the call was not answered for a reason that is no wrong answer (the
 * connection ended, the byte bound). */
function judged(what, { status, answer }, statuses, remaining, report, live, most = remaining) {
  if (status !== '0') {
    if (live() && status !== REFUSED) report(`${what}: grpc-status ${status}`);
    return undefined;
  }
  const bad = answer.statuses.findIndex((s) => s.code !== OK || s.remaining < remaining || s.remaining > most);
  if (answer.overall === OK && answer.statuses.length === statuses && bad === -1) return true;
  const s = answer.statuses[Math.max(bad, 0)];
  const got = `status ${bad}: code ${s?.code} remaining ${s?.remaining}`;
  report(`${what}: overall ${answer.overall}, ${answer.statuses.length} statuses, ${got}, expected OK ${remaining}`);
  return false;
}

/** In-flight takes from invented tenants, as fast as they are answered: 64 a call, each a tenant never seen, with a
 * fresh request id and a 24 h lease, never given back. Each is its tenant's first: OK, the limit − 1 left. */
export async function inventedTenants(port, signal, { address, tag, report, stat, note }) {
  let next = 0;
  let admitted = 0;
  await onConnections(port, signal, address, WIDTH, async (s, live) => {
    while (live()) {
      const first = next;
      next += TAKES_PER_CALL;
      const ds = Array.from({ length: TAKES_PER_CALL }, (_, i) =>
        descriptor([
          ['tenant', `${tag}-t${first + i}`],
          ['request_id', `r${first + i}`],
        ]),
      );
      const ok = judged(`takes ${first}–${next - 1}`, await unary(s, rlsMessage(INFLIGHT_DOMAIN, ds)), TAKES_PER_CALL, TENANT_LIMIT - 1, report, live);
      if (ok) admitted += TAKES_PER_CALL;
    }
  });
  stat('invented tenants', admitted);
  note(`${admitted} takes from invented tenants`);
}

const GIVE_ALL = 2 ** 32 - 1;
const POOLS_PER_CALL = 8;

/** Count-mode slots: 8 fresh pools take one slot each a call (a holder each) 1 to 100 times, then one call gives
 * back 2^32 − 1 on each (is_negative_hits), which returns at most 100 a descriptor: all each pool holds. After it,
 * each pool has its whole limit again, exactly. A take's remaining may be more than its count says, never less:
 * once the memory store's holders reach their shared bound (inventedTenants fills it), each take evicts a holder
 * of a counter that holds the most, which these pools are. */
export async function countGiveBacks(port, signal, { address, tag, report, stat, note }) {
  let cycles = 0;
  let done = 0;
  await onConnections(port, signal, address, WIDTH, async (s, live) => {
    while (live()) {
      const cycle = cycles++;
      const pools = Array.from({ length: POOLS_PER_CALL }, (_, j) => [['pool', `${tag}-p${cycle}-${j}`]]);
      const takes = 1 + ((cycle * 37) % 100);
      const call = (hits, negative) =>
        unary(
          s,
          rlsMessage(
            INFLIGHT_DOMAIN,
            pools.map((e) => descriptor(e, hits, negative)),
          ),
        );
      let ok = true;
      for (let t = 0; ok && t < takes && live(); t++)
        ok = judged(`cycle ${cycle}, take ${t + 1}`, await call(1), POOLS_PER_CALL, POOL_LIMIT - t - 1, report, live, POOL_LIMIT - 1);
      if (!ok || !live()) continue;
      const back = judged(`cycle ${cycle}: give-back of 2^32 − 1 after ${takes} takes`, await call(GIVE_ALL, true), POOLS_PER_CALL, POOL_LIMIT, report, live);
      if (!back || !live()) continue;
      if (judged(`cycle ${cycle}: check after the give-back`, await call(0), POOLS_PER_CALL, POOL_LIMIT, report, live)) done++;
    }
  });
  stat('count give-back cycles', done);
  note(`${done} give-back cycles of 8 pools`);
}

/** Envoy's rate-limit filter: every call with its timeout (grpc-timeout 50m) and reset (CANCEL) when unanswered at
 * 50 ms, ~2,000 calls a second on one connection kept for the whole attack, while the harness stops the service
 * for 300 ms (port-round.ts). The server must keep the connection: it is no client to end for its resets. */
export async function envoyTimeouts(port, signal, { address, report, stat, note }) {
  let s;
  while (!s && !signal.aborted) s = (await connect(port, address)) ?? (await sleep(50));
  if (!s) return;
  const CALLS_PER_SECOND = 2000;
  const n = { calls: 0, answered: 0, reset: 0 };
  let goaway;
  let endedEarly = false;
  s.on('goaway', (code) => (goaway ??= code));
  s.once('close', () => (endedEarly = !signal.aborted));
  const request = Buffer.from(
    rlsMessage('property-api', [
      descriptor([
        ['category', 'read'],
        ['token', 'envoy'],
      ]),
    ]),
  );
  const call = () => {
    let req;
    try {
      req = s.request({ ...GRPC, ':path': RLS_PATH, 'grpc-timeout': '50m' });
    } catch {
      return;
    }
    n.calls++;
    const timer = setTimeout(() => {
      n.reset++;
      req.close(http2.constants.NGHTTP2_CANCEL);
    }, 50);
    req.on('trailers', (h) => h['grpc-status'] !== undefined && n.answered++);
    req.on('data', () => undefined);
    req.on('error', () => undefined);
    req.on('close', () => clearTimeout(timer));
    req.end(request);
  };
  const started = performance.now();
  let issued = 0;
  const tick = setInterval(() => {
    const due = Math.floor(((performance.now() - started) * CALLS_PER_SECOND) / 1000);
    // A client that fell behind (its own process stalled) does not make up for it in one burst.
    issued = Math.max(issued, due - 20);
    for (; issued < due && !s.closed && !s.destroyed; issued++) call();
  }, 5);
  await new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }));
  clearInterval(tick);
  s.destroy();
  const names = { [http2.constants.NGHTTP2_ENHANCE_YOUR_CALM]: 'ENHANCE_YOUR_CALM', [http2.constants.NGHTTP2_INTERNAL_ERROR]: 'INTERNAL_ERROR' };
  if (goaway !== undefined || endedEarly)
    report(`the server ended the Envoy-like connection (GOAWAY ${names[goaway] ?? goaway}) after ${n.calls} calls, ${n.reset} reset at 50 ms`);
  stat('envoy calls', n.calls);
  note(`${n.calls} Envoy calls, ${n.answered} answered, ${n.reset} reset at 50 ms`);
}

export const ROUND6 = { inventedTenants, countGiveBacks, envoyTimeouts };
