/** Reads the Prometheus text format into series → value, for assertions. */
export function parseMetrics(text: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const at = line.lastIndexOf(' ');
    out.set(line.slice(0, at), Number(line.slice(at + 1)));
  }
  return out;
}

/** The value of the series with this name whose labels include `labels` (undefined if none; throws if several). */
export function metric(series: Map<string, number>, name: string, labels: Record<string, string> = {}): number | undefined {
  const wanted = Object.entries(labels).map(([k, v]) => `${k}="${v}"`);
  const found = [...series].filter(([s]) => {
    const brace = s.indexOf('{');
    const n = brace === -1 ? s : s.slice(0, brace);
    return n === name && wanted.every((w) => s.includes(w));
  });
  if (found.length > 1) throw new Error(`${found.length} series match ${name} ${wanted.join(',')}: ${found.map(([s]) => s).join('; ')}`);
  return found[0]?.[1];
}

export async function scrape(httpPort: number): Promise<{ text: string; series: Map<string, number> }> {
  const res = await fetch(`http://127.0.0.1:${httpPort}/metrics`);
  const text = await res.text();
  return { text, series: parseMetrics(text) };
}
