import * as grpc from '@grpc/grpc-js';
import { RlqsBounds } from './bounds.js';
import { AnswerSlots, CpuShare } from './cpu.js';
import type { RlqsDeps, RlqsProcessLimits, StreamDeps } from './deps.js';
import { RareLines } from './log.js';
import { type Call, RlqsStream } from './stream.js';
import { UnansweredReports } from './unanswered.js';

/** envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas: one stream per Envoy instance
 * and domain. Each usage report is answered with an action for every bucket it named: the bucket's token bucket
 * (or blanket rule), with a TTL of a few report intervals, re-sent every report so Envoy keeps its tokens and
 * restarts the TTL; abandon_action for buckets idle too long or past the stream's bound. Reports of one stream are
 * answered in order, one at a time. Each stream is its transport (stream.ts) and its session (session.ts), which
 * owns what is answered. Nothing a client sends reaches a log line or a metric label but as a length, a count or
 * a fingerprint. */

const DEFAULT_PROCESS_LIMITS: RlqsProcessLimits = { maxStreams: 10_000, maxBuckets: 50_000, cpuShare: 0.25 };

export interface RlqsServer {
  implementation: grpc.UntypedServiceImplementation;
  /** Ends every open stream with OK once its answers are written (shutdown): each Envoy reopens its stream on its
   * next report, to a replica still serving, and keeps its assignments meanwhile. */
  drain(): void;
  /** The gRPC port is bound: names this replica (identity.ts). */
  listening(port: number): void;
}

export function rlqsService(rlqs: RlqsDeps): RlqsServer {
  const open = new Set<RlqsStream>();
  const limits = rlqs.process ?? DEFAULT_PROCESS_LIMITS;
  const lines = new RareLines(rlqs.logger);
  const deps: StreamDeps = {
    ...rlqs,
    unanswered: new UnansweredReports(lines, rlqs.metrics),
    lines,
    bounds: new RlqsBounds(limits),
    cpu: new CpuShare(limits.cpuShare),
    slots: new AnswerSlots(),
    pending: { bytes: 0 },
  };
  const implementation = {
    StreamRateLimitQuotas: (call: Call) => {
      // Counted as it opens, before anything is read: a stream that never sends a message holds a place too.
      const admitted = deps.bounds.openStream(call.getPeer());
      if ('refused' in admitted) {
        refuse(call, deps, admitted.refused);
        return;
      }
      const stream = new RlqsStream(call, deps, deps.bounds.bucketBudget(call.getPeer()), () => {
        open.delete(stream);
        admitted.release();
      });
      open.add(stream);
      stream.start();
    },
  };
  deps.metrics?.measure(() => {
    let buckets = 0;
    for (const s of open) buckets += s.size;
    return { streams: open.size, buckets };
  });
  const drain = (): void => {
    for (const s of [...open]) s.drain();
  };
  return { implementation, drain, listening: (port) => rlqs.instances.listening(port) };
}

/** A stream past the stream bounds, ended at once with RESOURCE_EXHAUSTED: nothing of it is read or kept. */
function refuse(call: Call, deps: StreamDeps, why: 'address' | 'connection' | 'total'): void {
  deps.metrics?.streamErrors.inc({ reason: 'too_many_streams' });
  deps.lines.note('info', 'too_many_streams', { reason: 'too_many_streams', bound: why }, 'rlqs stream refused: too many streams open');
  call.on('error', () => undefined);
  call.pause();
  const details = `too many RLQS streams open from this ${why === 'total' ? 'replica' : why}`;
  call.emit('error', Object.assign(new Error(details), { code: grpc.status.RESOURCE_EXHAUSTED, details }));
}
