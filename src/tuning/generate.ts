/** A realistic traffic log for the property API, as JSON lines: 500 steady clients well within their limits,
 * 5 heavy clients whose bursts run past the per-second read limit, 5% of requests without credentials, and
 * a few requests outside the limited routes. Deterministic for a given seed. */

export interface GenerateOptions {
  lines: number;
  seed: number;
  /** Average requests per second of the whole log. */
  rate: number;
  startMs: number;
}

export const generateDefaults: Omit<GenerateOptions, 'lines'> = { seed: 1, rate: 200, startMs: Date.UTC(2026, 10, 21, 10, 0, 0) };

export function* generateTraffic(opts: GenerateOptions): Generator<string> {
  let state = opts.seed >>> 0 || 1;
  const random = (): number => {
    // xorshift32: fast, repeatable, good enough for traffic shapes
    state ^= state << 13;
    state ^= state >>> 17;
    state ^= state << 5;
    return (state >>> 0) / 2 ** 32;
  };
  const pickOne = <T>(xs: readonly T[]): T => xs[Math.floor(random() * xs.length)]!;
  const steady = 500;
  const heavy = 5;
  let t = opts.startMs;
  let burst = 0;
  let burstToken = '';
  for (let i = 0; i < opts.lines; i++) {
    const line: Record<string, string> = {};
    if (burst > 0) {
      // A heavy client's burst: reads a few milliseconds apart, past the 10/s read limit.
      burst--;
      t += random() * 8;
      Object.assign(line, { method: 'GET', path: pickOne(['/modules', '/invoices']), authorization: `Bearer ${burstToken}` });
    } else {
      t += -Math.log(1 - random()) * (1000 / opts.rate); // Poisson arrivals
      if (random() < 0.005) {
        burst = 12 + Math.floor(random() * 14);
        burstToken = `heavy-${Math.floor(random() * heavy)}`;
      }
      Object.assign(line, request(random, pickOne));
      if (random() < 0.95) line.authorization = `Bearer client-${Math.floor(random() * steady)}`;
    }
    yield JSON.stringify({ timestamp: new Date(Math.round(t)).toISOString(), ...line });
  }
}

/** A request of the mix: 68% read, 10% reports, 19% write, 3% outside the limited routes. */
function request(random: () => number, pickOne: <T>(xs: readonly T[]) => T): { method: string; path: string } {
  const kind = random();
  if (kind < 0.68)
    return {
      method: 'GET',
      path: pickOne(['/modules', '/invoices', `/invoices/INV-${Math.floor(random() * 9000) + 1000}`, `/modules/${Math.floor(random() * 40)}`]),
    };
  if (kind < 0.78) return { method: 'GET', path: `/reports/${pickOne(['monthly', 'occupancy', 'arrears', 'maintenance'])}` };
  if (kind < 0.97) {
    const method = pickOne(['POST', 'PUT', 'DELETE']);
    return { method, path: method === 'POST' ? '/invoices' : `/invoices/INV-${Math.floor(random() * 9000) + 1000}` };
  }
  return { method: 'GET', path: '/healthz' };
}
