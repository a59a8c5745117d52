import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { simulateCommand } from '../../src/commands/simulate-explain.js';
import { EnvoyConfigError, envoyCalls, loadEnvoyCallSetup } from '../../src/envoy/routes.js';
import { fingerprint } from '../../src/fingerprint.js';
import { EventQueue, PendingBoundError } from '../../src/tuning/event-queue.js';
import { MAX_HEADERS, readTraffic, type TrafficLine } from '../../src/tuning/traffic.js';

/** The inputs of a replay with costs and durations: the traffic log's duration and header columns (bounded),
 * Envoy's hits_addend and apply_on_stream_done as the route model reads them, the queue of pending ends, and
 * the command end to end on the fixtures. */

const dir = mkdtempSync(join(tmpdir(), 'simulate-streams-'));
const file = (name: string, text: string): string => {
  const path = join(dir, name);
  writeFileSync(path, text);
  return path;
};

async function readAll(path: string): Promise<{ lines: TrafficLine[]; bad: string[] }> {
  const bad: string[] = [];
  const lines: TrafficLine[] = [];
  for await (const l of readTraffic(path, { onBadLine: (n, reason) => bad.push(`${n}: ${reason}`) })) lines.push(l);
  return { lines, bad };
}

describe('traffic log: durations and headers', () => {
  it('reads duration_ms, duration or latency_ms as whole milliseconds from 0 to 24 h, and refuses the rest by line', async () => {
    const rows = [
      { duration_ms: 0 },
      { duration: '1500' },
      { latency_ms: 86_400_000 },
      { duration_ms: 86_400_001 },
      { duration_ms: -1 },
      { duration: 1.5 },
      { duration: 'soon' },
    ].map((extra) => JSON.stringify({ timestamp: 1795255200, method: 'GET', path: '/', ...extra }));
    const { lines, bad } = await readAll(file('d.jsonl', rows.join('\n')));
    expect(lines.map((l) => [l.n, l.durationMs])).toEqual([
      [1, 0],
      [2, 1500],
      [3, 86_400_000],
    ]);
    const reason = 'the duration is not a whole number of milliseconds from 0 to 86400000 (24 hours)';
    expect(bad).toEqual([4, 5, 6, 7].map((n) => `${n}: ${reason}`));
  });

  it('takes x-… fields and a headers object as request headers (lower-case), bounded in number, never echoed', async () => {
    const many = Object.fromEntries(Array.from({ length: MAX_HEADERS + 1 }, (_, i) => [`x-h${i}`, 'secret-value']));
    const rows = [
      { 'X-Tenant-Id': 'acme', headers: { 'X-AI-EG-Model': 'gpt', authorization: 'Bearer t' } },
      many,
      { headers: ['x-tenant-id'] },
      { 'x-tenant id': 'secret-value' },
    ].map((extra) => JSON.stringify({ timestamp: 1795255200, method: 'POST', path: '/v1/chat', ...extra }));
    const { lines, bad } = await readAll(file('h.jsonl', rows.join('\n')));
    expect(lines).toEqual([
      { timeMs: 1795255200000, method: 'POST', path: '/v1/chat', headers: { 'x-tenant-id': 'acme', 'x-ai-eg-model': 'gpt' }, authorization: 'Bearer t', n: 1 },
    ]);
    expect(bad).toEqual([
      `2: more than ${MAX_HEADERS} header fields`,
      '3: the headers field is not an object',
      '4: a header field name is not one (11 characters; letters, digits and -)',
    ]);
    expect(bad.join()).not.toContain('secret-value');
  });
});

describe("Envoy's two calls (hits_addend, apply_on_stream_done)", () => {
  const llm = loadEnvoyCallSetup('envoy/envoy-llm.yaml');
  const req = { method: 'POST', path: '/v1/chat', headers: { 'x-tenant-id': 'acme', 'x-ai-eg-model': 'gpt', 'x-request-id': 'r1' } };

  it('envoy-llm.yaml: the request reserves 2,000 on both; the stream end settles the response tokens under settle_id', () => {
    const calls = envoyCalls(llm, req)!;
    expect(calls.request.map((d) => [d.entries.map((e) => e.key).join(','), d.hits])).toEqual([
      ['tenant,request_id', 2000],
      ['tenant,model,request_id', 2000],
    ]);
    expect(calls.streamDone({ cost: 777, answered: true }).map((d) => [d.entries.map((e) => e.key).join(','), d.hits])).toEqual([
      ['tenant,settle_id', 777],
      ['tenant,model,settle_id', 777],
    ]);
    // No number from the metadata (no tokens logged, a refused request, past Envoy's 1e9): both dropped.
    expect(calls.streamDone({ cost: undefined, answered: true })).toEqual([]);
    expect(calls.streamDone({ cost: 777, answered: false })).toEqual([]);
    expect(calls.streamDone({ cost: 1_000_000_001, answered: true })).toEqual([]);
    expect(calls.costFromResponse).toBe(true);
    expect(envoyCalls(llm, { ...req, path: '/health' })).toBeUndefined();
  });

  it('envoy-inflight.yaml: the give-back (is_negative_hits) is sent for a refused request too', () => {
    const calls = envoyCalls(loadEnvoyCallSetup('envoy/envoy-inflight.yaml'), {
      method: 'GET',
      path: '/x',
      headers: { 'x-tenant-id': 'a', 'x-request-id': 'r' },
    })!;
    expect(calls.request).toEqual([
      {
        entries: [
          { key: 'tenant', value: 'a' },
          { key: 'request_id', value: 'r' },
        ],
      },
    ]);
    expect(calls.streamDone({ cost: undefined, answered: false })).toEqual([{ ...calls.request[0], hits: 1, negative: true }]);
  });

  it('reads %REQ(header)% from the request, and refuses a format or a field it does not model at load', () => {
    const text = readFileSync('envoy/envoy-llm.yaml', 'utf8');
    const req2 = loadEnvoyCallSetup(file('req.yaml', text.replaceAll('%DYNAMIC_METADATA(io.envoy.ai_gateway:llm_total_token)%', '%REQ(x-cost)%')));
    const done = envoyCalls(req2, { ...req, headers: { ...req.headers, 'x-cost': '42' } })!.streamDone({ cost: undefined, answered: false });
    expect(done.map((d) => d.hits)).toEqual([42, 42]);
    const bad = text.replace('%DYNAMIC_METADATA(io.envoy.ai_gateway:llm_total_token)%', '%UPSTREAM_HOST%');
    expect(() => loadEnvoyCallSetup(file('bad.yaml', bad))).toThrow(EnvoyConfigError);
    expect(() => loadEnvoyCallSetup(file('bad.yaml', bad))).toThrow(/route 0: hits_addend format "%UPSTREAM_HOST%" is not modelled/);
    const both = text.replace('hits_addend: { number: 2000 }', 'hits_addend: { number: 2000, format: "%REQ(x-cost)%" }');
    expect(() => loadEnvoyCallSetup(file('both.yaml', both))).toThrow(/either a format or a number/);
  });
});

describe('the queue of pending stream ends', () => {
  it('runs events in time order, ties in the order they were made, and refuses past its bound', () => {
    const q = new EventQueue<string>(5);
    for (const [t, v] of [
      [30, 'c'],
      [10, 'a1'],
      [20, 'b'],
      [10, 'a2'],
      [5, 'z'],
    ] as const)
      q.push(t, v);
    expect(() => q.push(1, 'over')).toThrow(PendingBoundError);
    expect(() => q.push(1, 'over')).toThrow(/more than 5 stream ends and slot renewals pending at once/);
    const order: string[] = [];
    for (let e = q.pop(); e; e = q.pop()) order.push(e.value);
    expect(order).toEqual(['z', 'a1', 'a2', 'b', 'c']);
  });
});

describe('tollgate simulate on the fixtures', () => {
  const out: string[] = [];
  afterEach(() => {
    vi.restoreAllMocks();
    out.length = 0;
  });
  const simulate = async (args: string[]): Promise<string> => {
    vi.spyOn(process.stdout, 'write').mockImplementation((s) => out.push(String(s)) > 0);
    await simulateCommand(args);
    return out.join('');
  };

  it('replays the LLM example from a CSV log: each tenant charged its logged tokens', async () => {
    const rows = readFileSync('test/fixtures/traffic-llm.csv', 'utf8').trim().split('\n').slice(1);
    const want = new Map<string, number>();
    for (const r of rows) {
      const [, , , tenant, , tokens] = r.split(',');
      want.set(fingerprint(tenant!), (want.get(fingerprint(tenant!)) ?? 0) + Number(tokens));
    }
    const args = ['--traffic', 'test/fixtures/traffic-llm.csv', '--config', 'examples', '--envoy', 'envoy/envoy-llm.yaml', '--json'];
    const report = JSON.parse(await simulate(args));
    expect(Object.fromEntries(report.topSpend.map((t: { fingerprint: string; charged: number }) => [t.fingerprint, t.charged]))).toEqual(
      Object.fromEntries(want),
    );
    expect(report.streamEnds).toBe(rows.length);
  });

  it('replays in_flight rules from a JSON-lines log with durations; without them, exits 2 naming the column', async () => {
    const lines = readFileSync('test/fixtures/traffic-inflight.jsonl', 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    // The ledger: 20 slots for the tenant; a stream holds one from its time to its time + its duration.
    const ends: number[] = [];
    let refused = 0;
    for (const l of lines) {
      // Ends due by a request's time run before it.
      ends.splice(0, ends.length, ...ends.filter((e) => e > l.timestamp));
      if (ends.length >= 20) refused++;
      else ends.push(l.timestamp + (l.duration_ms ?? l.duration));
    }
    const args = ['--traffic', 'test/fixtures/traffic-inflight.jsonl', '--config', 'examples', '--envoy', 'envoy/envoy-inflight.yaml', '--json'];
    const report = JSON.parse(await simulate(args));
    expect(refused).toBeGreaterThan(0);
    expect(report.inFlight).toEqual([
      { domain: 'inflight', rule: 'tenant', limit: 20, taken: lines.length - refused, refused, returned: lines.length - refused, peakHeld: 20 },
    ]);
    const noDuration = file('nodur.jsonl', `${JSON.stringify({ ...lines[0], duration_ms: undefined })}\n`);
    const err = await simulateCommand(['--traffic', noDuration, '--config', 'examples', '--envoy', 'envoy/envoy-inflight.yaml']).catch((e) => e);
    expect([err.exitCode, err.message]).toEqual([
      2,
      expect.stringMatching(
        /^simulate cannot replay in_flight rules \(inflight\/tenant\) without each request's duration: line 1 has none \(a column duration_ms/,
      ),
    ]);
  });
});
