import type { ReadReport } from './stream-buckets.js';

/** A report is answered in slices of about this many buckets, each in its own turn of RLQS's share of the
 * process (cpu.ts) with the event loop let go between them, so a 10,000-bucket report never holds RLS
 * decisions for the whole of its work: about 10 ms a slice on this machine's loaded core (500 made RLS's p99
 * under 64 streams × 10,000 buckets 44-64 ms, at the 50 ms bound). */
export const SLICE = 250;

export function emptyRead(): ReadReport {
  const refused = { too_many_buckets: 0, empty_bucket_id: 0, bad_bucket_id: 0 };
  return { usages: [], buckets: [], abandon: [], overflow: [], refused, idle: 0, allowed: 0, denied: 0 };
}

/** Adds one slice's reading to the report's. */
export function addRead(into: ReadReport, part: ReadReport): void {
  into.usages.push(...part.usages);
  into.buckets.push(...part.buckets);
  into.abandon.push(...part.abandon);
  into.overflow.push(...part.overflow);
  for (const k of Object.keys(part.refused) as (keyof ReadReport['refused'])[]) into.refused[k] += part.refused[k];
  into.idle += part.idle;
  into.allowed += part.allowed;
  into.denied += part.denied;
}

/** The indexes of a report's buckets in slices of about SLICE, a share key's buckets never split: the quota
 * service splits one grant among the buckets of a key that one instance holds, so they go in one call. */
export function sliceByShareKey(shareKeys: readonly string[]): number[][] {
  const groups = new Map<string, number[]>();
  const alone: number[][] = [];
  shareKeys.forEach((key, i) => {
    if (key === '') alone.push([i]);
    else {
      const g = groups.get(key);
      if (g) g.push(i);
      else groups.set(key, [i]);
    }
  });
  const slices: number[][] = [];
  let current: number[] = [];
  for (const g of [...groups.values(), ...alone]) {
    if (current.length > 0 && current.length + g.length > SLICE) {
      slices.push(current);
      current = [];
    }
    current.push(...g);
  }
  if (current.length > 0) slices.push(current);
  return slices;
}

/** `list` in slices of SLICE. */
export function slicesOf<T>(list: readonly T[]): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < list.length; i += SLICE) out.push(list.slice(i, i + SLICE));
  return out;
}
