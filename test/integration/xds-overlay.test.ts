import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { ConfigError } from '../../src/config/errors.js';
import { AdsServer } from '../helpers/ads-server.js';
import { AI_DOMAIN, AI_ROUTE, aiGatewayConfig } from '../helpers/envoy-gateway.js';
import { capturingLogger, type RlsRequest, startTestService, type TestService } from '../helpers/service.js';
import { within } from '../helpers/time.js';

// XDS_OVERLAY_FILE (issue 63, item 4): Tollgate's budget keys on a rule Envoy Gateway generates. The rule is AI
// Gateway's token limit as Envoy Gateway translates it (test/helpers/envoy-gateway.ts: 1,000 tokens an hour per
// x-user-id); Envoy is modelled as the overlay's docs tell it to be set up: the request id as a last entry at
// the request (the estimate) and under another key at the stream's end (the tokens).

const ESTIMATE = 100;
const TOKENS = 90;
const STREAMS = 50;
const LIMIT = 1000;
const path = `[{key: "${AI_ROUTE}", value: "${AI_ROUTE}"}, {key: rule-0-match-0}]`;
const SET = 'set: {charge_mode: true, reservation_key: request_id, settlement_key: settle_id}';
const reserved = `overlays:\n  - domain: ${AI_DOMAIN}\n    descriptors: ${path}\n    ${SET}\n`;
const entries = (user: string, last?: [string, string]) => [
  { key: AI_ROUTE, value: AI_ROUTE },
  { key: 'rule-0-match-0', value: user },
  ...(last ? [{ key: last[0], value: last[1] }] : []),
];
const call = (user: string, hits: number, last?: [string, string]): RlsRequest => ({
  domain: AI_DOMAIN,
  descriptors: [{ entries: entries(user, last), hits_addend: { value: hits } }],
});
const remaining = async (t: TestService, user: string): Promise<number> => (await t.rls.call(call(user, 0))).statuses[0]!.limit_remaining;

let t: TestService | undefined;
let ads: AdsServer | undefined;
let dir: string | undefined;
afterEach(async () => {
  await t?.close();
  ads?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
  t = ads = dir = undefined;
});

async function serve(overlay: string | undefined, logger = capturingLogger().logger, limit = LIMIT): Promise<string> {
  dir = mkdtempSync(join(tmpdir(), 'tollgate-overlay-'));
  const file = join(dir, 'overlay.yaml');
  if (overlay !== undefined) writeFileSync(file, overlay);
  ads = new AdsServer();
  const port = await ads.start();
  const args = ['--config-type', 'GRPC_XDS_SOTW', '--xds-server-url', `127.0.0.1:${port}`, '--config-poll-ms', '50'];
  t = await startTestService({ args: [...args, ...(overlay !== undefined ? ['--xds-overlay', file] : [])], logger });
  ads.push('1', [{ config: aiGatewayConfig() as unknown as Record<string, unknown> }]);
  await within(5000, async () => (await remaining(t!, 'probe').catch(() => -1)) === limit, 'the generated rule');
  return file;
}

/** 50 streams of one user at once: each asks with its estimate, then its stream ends with its tokens. */
async function streams(mode: 'reserved' | 'plain'): Promise<{ admitted: number }> {
  const ids = Array.from({ length: STREAMS }, (_, i) => `req-${i}`);
  const asked = await Promise.all(ids.map((id) => t!.rls.call(mode === 'reserved' ? call('u', ESTIMATE, ['request_id', id]) : call('u', 0))));
  await Promise.all(ids.map((id) => t!.rls.call(mode === 'reserved' ? call('u', TOKENS, ['settle_id', id]) : call('u', TOKENS))));
  return { admitted: asked.filter((r) => r.overall_code === 'OK').length };
}

describe('an overlay on rules from xDS', () => {
  it('turns an Envoy Gateway rule into a reserved token budget: 50 concurrent streams do not overshoot it', async () => {
    await serve(reserved);
    const { admitted } = await streams('reserved');
    expect(admitted).toBe(LIMIT / ESTIMATE); // as many estimates as fit, and no more
    expect(await remaining(t!, 'u')).toBe(LIMIT - admitted * TOKENS); // each settled to its tokens; refused ones cost nothing
  });

  it('without it, the same streams all pass and spend 4.5 times the budget (what the overlay fixes)', async () => {
    await serve(undefined);
    expect((await streams('plain')).admitted).toBe(STREAMS);
    expect(await remaining(t!, 'u')).toBe(0);
    const over = await t!.rls.call(call('u', 0));
    expect(over.overall_code).toBe('OVER_LIMIT'); // 4,500 of 1,000 charged
  });

  it('hot-reloads: an edit applies to the last response; a bad edit is rejected, by line, and the last good stays', async () => {
    const { logger, lines } = capturingLogger();
    const file = await serve(
      reserved.replace('charge_mode: true, reservation_key: request_id, settlement_key: settle_id', 'rate_limit: {requests_per_unit: 7}'),
      logger,
      7,
    );
    expect(await remaining(t!, 'probe')).toBe(7); // merged into the generated rate_limit: unit HOUR kept
    writeFileSync(file, reserved.replace('rate_limit: {requests_per_unit: 7}', '').replace(/set: \{.*\}/, 'set: {rate_limit: {requests_per_unit: 9}}'));
    await within(5000, async () => (await remaining(t!, 'probe2')) === 9, 'the edit applied');
    writeFileSync(file, `${reserved.replace('charge_mode: true', 'charge_mode: maybe')}`);
    await within(5000, () => lines().some((l) => l.msg === 'config reload rejected: keeping the last good config'), 'rejected');
    const rejected = lines().find((l) => l.msg === 'config reload rejected: keeping the last good config')!;
    expect(String((rejected.problems as string[])[0])).toMatch(/descriptors\[0\]\.charge_mode: must be true or false/);
    expect(await remaining(t!, 'probe3')).toBe(9);
  });

  it('an overlay whose value breaks the first response holds readiness; fixing the file makes the service ready', async () => {
    dir = mkdtempSync(join(tmpdir(), 'tollgate-overlay-'));
    const file = join(dir, 'overlay.yaml');
    writeFileSync(file, reserved.replace('charge_mode: true', 'charge_mode: maybe'));
    ads = new AdsServer();
    const port = await ads.start();
    const args = ['--config-type', 'GRPC_XDS_SOTW', '--xds-server-url', `127.0.0.1:${port}`, '--config-poll-ms', '50', '--xds-overlay', file];
    t = await startTestService({ args });
    ads.push('1', [{ config: aiGatewayConfig() as unknown as Record<string, unknown> }]);
    await within(5000, () => ads!.requests().some((r) => r.error_detail !== null), 'the first response NACKed');
    const readyz = async (): Promise<number> => (await fetch(`http://127.0.0.1:${t!.service.httpPort}/readyz`)).status;
    expect(await readyz()).toBe(503);
    writeFileSync(file, reserved);
    await within(5000, async () => (await readyz()) === 200, 'ready once the fixed overlay makes the response good');
    expect(await remaining(t!, 'probe')).toBe(LIMIT);
  });

  it('an entry whose path the domain lacks is logged, by its line; a bad overlay stops the start', async () => {
    const { logger, lines } = capturingLogger();
    await serve(`${reserved}  - domain: ${AI_DOMAIN}\n    descriptors: [{key: no-such-rule}]\n    set: {charge_mode: true}\n`, logger);
    await within(5000, () => lines().some((l) => String(l.msg).startsWith('xDS overlay:')), 'note');
    expect(String(lines().find((l) => String(l.msg).startsWith('xDS overlay:'))!.msg)).toMatch(/overlay\.yaml:5: overlay entry: the domain has no descriptor/);
    await t!.close();
    ads!.stop();
    t = ads = undefined;
    const bad = join(dir!, 'bad.yaml');
    writeFileSync(bad, 'overlays:\n  - domain: x\n    descriptors: [{key: a}]\n    set: {key: renamed, tiers: [gold]}\n');
    const args = ['--config-type', 'GRPC_XDS_SOTW', '--xds-overlay', bad];
    const err = await startTestService({ args }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConfigError);
    expect((err as ConfigError).message).toMatch(/bad\.yaml:4:\d+: overlays\[0\]\.set\.key: unknown key/);
    expect((err as ConfigError).message).toMatch(/overlays\[0\]\.set\.tiers: unknown key/); // a domain's key, on a descriptor
  });
});
