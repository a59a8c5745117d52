import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from './process.js';

/** A real Prometheus (Debian package) scraping the given targets every second, on loopback. */
export interface Prometheus {
  port: number;
  query(expr: string): Promise<{ status: string; data: { resultType: string; result: unknown[] } }>;
  stop(): Promise<void>;
}

/** `labels`: target labels added to every scraped series, as the Prometheus Operator adds namespace and pod. */
export async function startPrometheus(targets: string[], labels: Record<string, string> = {}): Promise<Prometheus> {
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-prometheus-'));
  const port = await freePort();
  writeFileSync(
    join(dir, 'prometheus.yml'),
    'global: {scrape_interval: 1s, evaluation_interval: 1s}\nscrape_configs:\n  - job_name: tollgate\n    static_configs:\n' +
      `      - targets: [${targets.map((t) => `"${t}"`).join(', ')}]\n        labels: ${JSON.stringify(labels)}\n`,
  );
  const proc: ChildProcess = spawn(
    'prometheus',
    [`--config.file=${join(dir, 'prometheus.yml')}`, `--storage.tsdb.path=${join(dir, 'data')}`, `--web.listen-address=127.0.0.1:${port}`],
    { stdio: 'ignore' },
  );
  const base = `http://127.0.0.1:${port}`;
  const until = Date.now() + 20_000;
  for (;;) {
    try {
      if ((await fetch(`${base}/-/ready`)).ok) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > until || proc.exitCode !== null) throw new Error('prometheus did not become ready');
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    port,
    query: async (expr) => (await fetch(`${base}/api/v1/query?query=${encodeURIComponent(expr)}`)).json() as never,
    stop: async () => {
      const exited = new Promise((r) => proc.once('exit', r));
      proc.kill('SIGTERM');
      await exited;
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
