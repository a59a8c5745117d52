import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { configDir, type RlsRequest, startTestService } from '../helpers/service.js';
import { within } from '../helpers/time.js';

// A reload that changes an in_flight rule's kind keeps the slots held before it (docs/in-flight.md, "Reloads"):
// nothing is released early, so no reload admits past the limit. Give-backs sent while the rule was of another
// kind reach that kind (a rate_limit descriptor with the request id matches no limit), not the slots: slots whose
// requests ended meanwhile come back by their lease, at most one lease after the rule is in_flight again.

const inFlight = 'domain: api\ndescriptors:\n  - key: tenant\n    in_flight: {limit: 2, lease: 1m, request_key: request_id}\n';
const rateLimit = 'domain: api\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: second, requests_per_unit: 1000}\n';
const call = (id: string, back = false): RlsRequest => ({
  domain: 'api',
  descriptors: [
    {
      entries: [
        { key: 'tenant', value: 'acme' },
        { key: 'request_id', value: id },
      ],
      ...(back && { hits_addend: { value: 1 }, is_negative_hits: true }),
    },
  ],
});

describe('a reload that changes an in_flight rule to rate_limit and back', () => {
  it('keeps the held slots: none admitted past the limit; those given back meanwhile return by their lease', async () => {
    const dir = configDir({ 'api.yaml': inFlight });
    const s = await startTestService({ configDir: dir });
    try {
      // The file rewritten and read again, by this reload or by the watcher before it (then 'unchanged').
      const rewrite = async (text: string) => {
        const before = s.service.config();
        writeFileSync(join(dir, 'api.yaml'), text);
        await s.service.reload();
        await within(5000, () => s.service.config() !== before, 'the config read again');
      };
      const codes = async (ids: string[]) => Promise.all(ids.map(async (id) => (await s.rls.call(call(id))).overall_code));
      expect(await codes(['r1', 'r2', 'r3'])).toEqual(['OK', 'OK', 'OVER_LIMIT']);
      await rewrite(rateLimit);
      // r1 and r2 end while the rule counts requests: their give-backs reach no slot.
      for (const id of ['r1', 'r2']) expect((await s.rls.call(call(id, true))).overall_code).toBe('OK');
      await rewrite(inFlight);
      expect(await codes(['r4'])).toEqual(['OVER_LIMIT']);
      // One lease on, r1's and r2's slots have come back.
      s.clock.advance(60_001);
      expect(await codes(['r5', 'r6', 'r7'])).toEqual(['OK', 'OK', 'OVER_LIMIT']);
    } finally {
      await s.close();
    }
  });
});
