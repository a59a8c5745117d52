import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestService, type TestService } from '../helpers/service.js';

// The service runs in this process: the shell must not block its event loop (execFileSync would deadlock).
const run = async (script: string): Promise<string> => (await promisify(execFile)('bash', ['-c', script], { encoding: 'utf8', timeout: 15_000 })).stdout;

/** README's tour runs as written: its shell blocks, against a real service (the port rewritten to the test's),
 * answer what the text says they answer. */

const readme = readFileSync('README.md', 'utf8');
const tour = readme.slice(readme.indexOf('## A minute with it'), readme.indexOf('## Documentation'));
const shellBlocks = [...tour.matchAll(/```sh\n([\s\S]*?)```/g)].map((m) => m[1]!);

describe('README, "A minute with it"', () => {
  let t: TestService;
  beforeAll(async () => {
    t = await startTestService({ realClock: true });
  });
  afterAll(async () => {
    await t.close();
  });

  it('has the curl loop and the explain command', () => {
    expect(shellBlocks).toHaveLength(2);
  });

  it('the curl loop: two admitted, the third a 429 with Retry-After, as the text shows', async () => {
    const script = shellBlocks[0]!.replaceAll('localhost:8080', `127.0.0.1:${t.service.httpPort}`);
    // All three in one second, as the text assumes: retried once if a second boundary splits them.
    let answers: { overallCode: string; responseHeadersToAdd: { key: string; value: string }[] }[] = [];
    for (let attempt = 0; attempt < 2; attempt++) {
      answers = (await run(script))
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l));
      if (answers[2]?.overallCode === 'OVER_LIMIT') break;
    }
    expect(answers.map((a) => a.overallCode).slice(-1)).toEqual(['OVER_LIMIT']);
    expect(answers[2]!.responseHeadersToAdd).toContainEqual({ key: 'Retry-After', value: '1' });
    expect(tour).toContain('"overallCode":"OVER_LIMIT"');
  });

  it('the explain command names the window a burst runs into first', async () => {
    const out = await run(shellBlocks[1]!);
    expect(out).toContain('a burst is stopped first by reports-per-second');
    expect(tour).toContain('`reports-per-second`');
  });
});
