import { statSync } from 'node:fs';
import type { Simulation } from './simulate.js';
import { BadLines, readTraffic, type TRAFFIC_FORMATS, TrafficError } from './traffic.js';

/** Feeds every request of the log to each simulation, then runs the streams still open at its end. Lines that
 * are not requests are collected; unless skipped on purpose they fail the run, since a report missing part of
 * the log would mislead. */
export async function replay(file: string, sims: Simulation[], opts: { format: (typeof TRAFFIC_FORMATS)[number]; skipBadLines: boolean }): Promise<void> {
  const total = statSync(file).size;
  const onProgress = process.stderr.isTTY ? (bytes: number) => process.stderr.write(`\rreplaying ${file}: ${Math.round((100 * bytes) / total)}%`) : undefined;
  const bad = new BadLines();
  for await (const line of readTraffic(file, { format: opts.format, onProgress, onBadLine: (n, reason) => bad.add(n, reason) })) {
    for (const sim of sims) await sim.feed(line);
  }
  for (const sim of sims) await sim.finish();
  if (onProgress) process.stderr.write('\r\x1b[K');
  if (bad.count === 0) return;
  if (!opts.skipBadLines) throw new TrafficError(`${bad.summary(file)} (nothing reported; --skip-bad-lines replays the other lines)`);
  process.stderr.write(`tollgate: warning: ${bad.summary(file)} (skipped)\n`);
}
