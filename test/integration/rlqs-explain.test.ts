import { describe, expect, it } from 'vitest';
import { runCli } from '../helpers/process.js';

// `tollgate explain --bucket`: an RLQS BucketId shown as the descriptor the quota service plans it as.

describe('tollgate explain --bucket', () => {
  it('orders the pairs as the config does, hides the token, and names the windows assignments come from', async () => {
    const r = await runCli(['explain', '--bucket', 'property-api', 'token=Bearer secret-token', 'category=reports']);
    expect(r.code).toBe(0);
    const first = r.stdout.split('\n')[0]!;
    expect(first).toMatch(/^RLQS bucket → descriptor \[category=reports, token=fingerprint:[0-9a-f]{32}\]/);
    expect(r.stdout).toContain('at most the rate of reports-per-second (2/second)');
    expect(r.stdout).toContain('less what RLS decisions admitted on reports-per-second over its last window');
    expect(r.stdout).toContain('what is left of reports-per-hour (200/hour)');
    expect(r.stdout).toContain('rule category_reports.token');
    expect(r.stdout).not.toContain('secret-token');
  });

  it('says a bucket no rule matches gets ALLOW_ALL, and refuses what is not one map of pairs', async () => {
    const r = await runCli(['explain', '--bucket', '--json', 'property-api', 'category=read', 'extra=1']);
    expect(JSON.parse(r.stdout).bucket).toMatchObject({ fixed: 'ALLOW_ALL', rates: [], quotas: [] });
    const bad = await runCli(['explain', '--bucket', 'property-api', 'category=read', '+', 'token=x']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('a BucketId is one map of pairs');
  });
});
