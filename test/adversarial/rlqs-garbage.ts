/** Malformed, huge and random RLQS messages: each case is the frames one stream sends before it half-closes,
 * and the statuses docs/rlqs.md ("Bounds") and grpc-js allow for it. A half-closed stream must end with a status
 * within a few seconds whatever it sent; where the case's buckets are known, its answers are judged too. */
import { gzipSync } from 'node:zlib';
import * as grpc from '@grpc/grpc-js';
import { enc, varint } from '../helpers/protowire.js';
import type { Rng } from './fuzz-lib.js';
import { type Actor, connect, judgeStream, randomBucket } from './rlqs-attacks.js';
import { Reported, RLQS_DOMAIN } from './rlqs-judge.js';
import { frame, report, usage } from './rlqs-wire.js';

const { status } = grpc;
const INVALID: number[] = [status.INVALID_ARGUMENT];
/** Bytes that may or may not decode as a report: refused as undecodable, or read (then answered, and ended OK
 * after the half-close), or refused for what they decode to (no domain, a bound). */
const EITHER: number[] = [status.OK, status.INVALID_ARGUMENT, status.RESOURCE_EXHAUSTED];

interface GarbageCase {
  kind: string;
  frames: Buffer[];
  headers?: Record<string, string>;
  allowed: number[];
  /** The buckets sent, when the case's answers can be judged. */
  reported?: Reported;
}

/** A valid report of a few random buckets, and what it reported. */
function validReport(r: Rng, marker: string, domain = RLQS_DOMAIN): { bytes: Buffer; reported: Reported } {
  const reported = new Reported(domain);
  const ids = Array.from({ length: r.between(1, 6) }, () => randomBucket(r, marker));
  for (const id of ids) reported.add(id);
  return {
    bytes: report(
      domain,
      ids.map((id) => usage(id, r.int(20), r.int(5))),
    ),
    reported,
  };
}

/** Ids past the bounds (empty, an empty key or value, a value over MAX_VALUE_BYTES, more pairs than
 * MAX_DESCRIPTOR_ENTRIES) beside a valid one: only the valid one is answered. */
function badIds(r: Rng, marker: string): GarbageCase {
  const reported = new Reported(RLQS_DOMAIN);
  const bad: Record<string, string>[] = [
    {},
    { tenant: '' },
    { '': marker },
    { tenant: `${marker}${'x'.repeat(70_000)}` },
    Object.fromEntries(Array.from({ length: 40 }, (_, i) => [`k${i}`, marker])),
  ];
  for (const id of bad) reported.add(id, true);
  const good = { tenant: `${marker}-good${r.int(100)}` };
  reported.add(good);
  return {
    kind: 'bucket ids past the bounds',
    frames: [
      frame(
        report(
          RLQS_DOMAIN,
          [...bad, good].map((id) => usage(id)),
        ),
      ),
    ],
    allowed: [status.OK],
    reported,
  };
}

/** Unknown field 99 nested `depth` deep, appended to a valid report: skipped unread. */
function nestedUnknown(depth: number, marker: string): number[] {
  const inner = enc.string(99, marker);
  const lengths = [inner.length];
  for (let i = 1; i < depth; i++) lengths.push(lengths[i - 1]! + 2 + varint(lengths[i - 1]!).length);
  const out: number[] = [];
  for (let i = depth - 1; i >= 0; i--) out.push(0x9a, 0x06, ...varint(lengths[i]!));
  out.push(...inner);
  return out;
}

function mutated(r: Rng, marker: string): GarbageCase {
  const { bytes, reported } = validReport(r, marker);
  const b = [...bytes];
  switch (r.int(6)) {
    case 0:
      for (let i = r.between(1, 4); i > 0; i--) b[r.int(b.length)] = r.int(256);
      return { kind: 'bit flips', frames: [frame(Buffer.from(b))], allowed: EITHER };
    case 1:
      return { kind: 'truncated report', frames: [frame(Buffer.from(b.slice(0, r.int(b.length))))], allowed: EITHER };
    case 2:
      return { kind: 'random bytes', frames: [frame(Buffer.from(r.bytes(r.int(300))))], allowed: EITHER };
    case 3:
      return { kind: 'huge declared field length', frames: [frame(Buffer.from([...enc.string(1, marker), 0x12, ...varint(2 ** 31)]))], allowed: INVALID };
    case 4:
      // Field 15 (unknown) opening groups that never close: undecodable, however deep (a thrown RangeError).
      return {
        kind: 'groups never closed',
        frames: [frame(Buffer.from([...enc.string(1, RLQS_DOMAIN), ...Array<number>(r.pick([1, 100, 10_000])).fill(0x7b)]))],
        allowed: INVALID,
      };
    default: {
      const extra = Buffer.from(nestedUnknown(r.pick([10, 1000, 10_000]), marker));
      return { kind: 'deeply nested unknown field', frames: [frame(Buffer.concat([bytes, extra]))], allowed: [status.OK], reported };
    }
  }
}

function protocolCase(r: Rng, marker: string): GarbageCase {
  const { bytes, reported } = validReport(r, marker);
  switch (r.int(7)) {
    case 0:
      return { kind: 'no domain', frames: [frame(report('', [usage({ tenant: marker })]))], allowed: INVALID };
    case 1:
      return { kind: 'domain over the bound', frames: [frame(report(`${marker}${'d'.repeat(65_536)}`, [usage({ tenant: 'a' })]))], allowed: INVALID };
    case 2:
      return { kind: 'domain changed', frames: [frame(bytes), frame(report(`${marker}-other`, [usage({ tenant: marker })]))], allowed: INVALID, reported };
    case 3:
      return { kind: 'empty message', frames: [frame(Buffer.alloc(0))], allowed: INVALID };
    case 4:
      return { kind: 'gzip report', frames: [frame(gzipSync(bytes), 1)], headers: { 'grpc-encoding': 'gzip' }, allowed: [status.OK], reported };
    case 5:
      // grpc-js answers INTERNAL "Failed to decompress" before Tollgate sees the message (docs/operations.md).
      return {
        kind: 'gzip garbage',
        frames: [frame(Buffer.from([...Buffer.from(marker), ...r.bytes(20)]), 1)],
        headers: { 'grpc-encoding': 'gzip' },
        allowed: [status.INTERNAL],
      };
    default:
      return {
        kind: 'marker in metadata',
        frames: [frame(bytes)],
        headers: { 'x-envoy-marker': marker, authorization: `Bearer ${marker}` },
        allowed: [status.OK],
        reported,
      };
  }
}

function countsCase(r: Rng, marker: string): GarbageCase {
  const reported = new Reported(RLQS_DOMAIN);
  const id = { tenant: `${marker}-n${r.int(100)}` };
  reported.add(id);
  if (r.chance(0.5)) {
    // uint64 counts at their largest, a negative time_elapsed: read as at most 2^32 − 1, the time ignored.
    const bucketId = enc.message(1, enc.message(1, enc.string(1, 'tenant'), enc.string(2, id.tenant)));
    const elapsed = enc.message(2, enc.varint(1, 2n ** 64n - 1n));
    const counts = [...enc.varint(3, 2n ** 64n - 1n), ...enc.varint(4, 2n ** 64n - 1n)];
    const body = Buffer.from([...enc.string(1, RLQS_DOMAIN), ...enc.message(2, bucketId, elapsed, counts)]);
    return { kind: 'extreme counts', frames: [frame(body)], allowed: EITHER, reported };
  }
  return {
    kind: 'one bucket a thousand times',
    frames: [
      frame(
        report(
          RLQS_DOMAIN,
          Array.from({ length: 1000 }, () => usage(id, 1, 1)),
        ),
      ),
    ],
    allowed: [status.OK],
    reported,
  };
}

function garbageCase(r: Rng, marker: string, serial: number, light: boolean): GarbageCase {
  // The costly one (4 MiB on the wire) on a few streams only.
  if (serial % 40 === 39 && !light)
    return { kind: 'message over 4 MiB', frames: [frame(Buffer.alloc(4 * 1024 * 1024 + 1, 0x41))], allowed: [status.RESOURCE_EXHAUSTED] };
  const roll = r.int(10);
  if (roll < 4) return mutated(r, marker);
  if (roll < 7) return protocolCase(r, marker);
  if (roll < 8) return countsCase(r, marker);
  if (roll < 9) return badIds(r, marker);
  return { kind: 'declared length over 4 MiB', frames: [frame(Buffer.from(r.bytes(100)), 0, 4 * 1024 * 1024 + 1)], allowed: [status.RESOURCE_EXHAUSTED] };
}

/** Streams of malformed messages, a few at a time, each half-closed and judged on how it ended. */
export const garbage: Actor = async (env) => {
  const { r, ctx } = env;
  let serial = r.int(40);
  while (Date.now() < env.until) {
    const conn = connect(env);
    const cases = Array.from({ length: r.between(1, 8) }, () => garbageCase(r, ctx.marker, serial++, ctx.light));
    await Promise.all(
      cases.map(async (c) => {
        ctx.count(`rlqs ${c.kind}`);
        const s = conn.open(c.headers);
        for (const f of c.frames) s.write(f);
        s.end();
        if (!(await s.whenClosed(5000)))
          ctx.wrong.add({ index: ctx.index, kind: `rlqs ${c.kind}`, problem: 'no status 5 s after the client ended its stream' });
        else if (s.status === undefined && conn.endedByBound) ctx.count('rlqs connection ended by a bound of the port');
        else if (s.status === undefined) ctx.wrong.add({ index: ctx.index, kind: `rlqs ${c.kind}`, problem: s.closedWithout ?? 'no status' });
        judgeStream(env, c.kind, s, c.allowed, c.reported);
      }),
    );
    conn.close();
  }
};
