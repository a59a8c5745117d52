import { Metadata } from '@grpc/grpc-js';
import { describe, expect, it } from 'vitest';
import { callerContext } from '../../src/tracing/propagation.js';
import { Tracing } from '../../src/tracing/tracing.js';

/** envoyproxy/ratelimit samples ParentBased(TraceIDRatioBased(rate)); Tollgate draws the ratio itself for
 * roots, before any span is made. These hold it to the same result. Spans here are never ended, so nothing
 * is exported. */

const queue = { maxQueueSize: 16, maxExportBatchSize: 16, scheduledDelayMs: 60_000, exportTimeoutMs: 1000 };
const tracing = (samplingRate: number) =>
  Tracing.create(
    { protocol: 'http/json', serviceName: 't', serviceNamespace: '', serviceInstanceId: 'i', samplingRate, version: '0', queue },
    'memory',
    () => {},
  );

function withParent(flags: '00' | '01'): Metadata {
  const m = new Metadata();
  m.set('traceparent', `00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-${flags}`);
  return m;
}

describe('sampling of decisions', () => {
  it('samples about `rate` of the traces that start here (4,000 calls at 0.25: within 5 standard deviations of 1,000)', async () => {
    const t = await tracing(0.25);
    let sampled = 0;
    for (let i = 0; i < 4000; i++) if (t.startDecision('grpc', callerContext(new Metadata()))?.isRecording()) sampled++;
    expect(sampled).toBeGreaterThan(860);
    expect(sampled).toBeLessThan(1140);
    await t.shutdown(100);
  });

  it('rate 0: none of its own; a sampled caller is followed, an unsampled one is not (whatever the rate)', async () => {
    const none = await tracing(0);
    for (let i = 0; i < 200; i++) expect(none.startDecision('grpc', callerContext(new Metadata()))).toBeUndefined();
    expect(none.startDecision('grpc', callerContext(withParent('01')))?.isRecording()).toBe(true);
    const all = await tracing(1);
    expect(all.startDecision('grpc', callerContext(new Metadata()))?.isRecording()).toBe(true);
    const unsampled = all.startDecision('grpc', callerContext(withParent('00')));
    expect(unsampled?.isRecording()).toBe(false);
    expect(unsampled?.spanContext().traceId).toBe('4bf92f3577b34da6a3ce929d0e0e4736');
    expect(all.linkOf(unsampled!)).toBeUndefined();
    await Promise.all([none.shutdown(100), all.shutdown(100)]);
  });
});
