import { isUtf8 } from 'node:buffer';
import { LEN, Reader, VARINT } from '../rls/rls-decode.js';
import type { WireBucketId, WireReport, WireUsage } from './messages.js';

/** RateLimitQuotaUsageReports (envoy/service/rate_limit_quota/v3/rlqs.proto), decoded by hand on the
 * RLS decoder's reader: about a microsecond a usage and one object each, where protobufjs's decode-then-
 * toObject made four and took several times as long (a 10,000-bucket report was the largest single piece of
 * RLQS work, and most of its garbage). Read: domain = 1; bucket_quota_usages = 2 { bucket_id = 1 { map<string,
 * bytes> bucket = 1 }, time_elapsed = 2 (not read: Tollgate measures time on its own clock),
 * num_requests_allowed = 3, num_requests_denied = 4 }. Unknown fields are skipped; a map key given twice keeps
 * its last value, as protobuf says. */

/** The report, or undefined if the bytes are not one. */
export function decodeUsageReports(buf: Buffer): WireReport | undefined {
  const r = new Reader(buf);
  const report: WireReport = { domain: '', bucket_quota_usages: [] };
  for (let tag = r.tag(); tag !== 0; tag = r.tag()) {
    const field = Math.floor(tag / 8);
    if (field === 1 && r.is(tag, LEN)) report.domain = utf8(r);
    else if (field === 2 && r.is(tag, LEN)) report.bucket_quota_usages.push(r.nested(usage));
    else if (field !== 1 && field !== 2) r.skip(tag % 8);
  }
  return r.problem === undefined ? report : undefined;
}

function usage(r: Reader): WireUsage {
  const u: WireUsage = { bucket_id: null, num_requests_allowed: 0, num_requests_denied: 0 };
  for (let tag = r.tag(); tag !== 0; tag = r.tag()) {
    const field = Math.floor(tag / 8);
    if (field === 1 && r.is(tag, LEN)) u.bucket_id = { bucket: r.nested(bucketId) };
    else if ((field === 3 || field === 4) && r.is(tag, VARINT)) {
      const n = r.varint(10);
      if (field === 3) u.num_requests_allowed = n;
      else u.num_requests_denied = n;
    } else if (field !== 1 && field !== 3 && field !== 4) r.skip(tag % 8);
  }
  return u;
}

function bucketId(r: Reader): WireBucketId {
  const pairs: WireBucketId = {};
  for (let tag = r.tag(); tag !== 0; tag = r.tag()) {
    if (Math.floor(tag / 8) === 1 && r.is(tag, LEN)) {
      const [k, v] = r.nested(pair);
      pairs[k] = v;
    } else if (Math.floor(tag / 8) !== 1) r.skip(tag % 8);
  }
  return pairs;
}

/** One map entry: key = 1 (string), value = 2 (bytes); either may be absent (empty). Values are copied out of
 * the message, so a bucket held for an hour does not keep its whole report's bytes alive. */
function pair(r: Reader): [string, Buffer] {
  let key = '';
  let value = EMPTY;
  for (let tag = r.tag(); tag !== 0; tag = r.tag()) {
    const field = Math.floor(tag / 8);
    if (field === 1 && r.is(tag, LEN)) key = utf8(r);
    else if (field === 2 && r.is(tag, LEN)) {
      const end = r.length();
      if (r.problem === undefined) value = Buffer.from(r.buf.subarray(r.pos, end));
      r.pos = end;
    } else if (field !== 1 && field !== 2) r.skip(tag % 8);
  }
  return [key, value];
}

const EMPTY = Buffer.alloc(0);

/** A string field, which protobuf requires to be UTF-8: bytes that are not make the message undecodable, as
 * protobufjs (and Envoy's own parser) refuse them. A key read any other way would be echoed back changed. */
function utf8(r: Reader): string {
  const end = r.length();
  if (r.problem !== undefined) return '';
  const bytes = r.buf.subarray(r.pos, end);
  r.pos = end;
  if (!isUtf8(bytes)) r.fail('a string field is not UTF-8');
  return bytes.toString('utf8');
}

/** A report's domain, read as it arrives without decoding its usages (each is skipped by its length), or
 * undefined if the message is not well formed at its top level: a stream that changes its domain, names none or
 * sends bytes that are not a report is told at once, not when its report's turn comes. */
export function peekDomain(buf: Buffer): string | undefined {
  const r = new Reader(buf);
  let domain = '';
  for (let tag = r.tag(); tag !== 0; tag = r.tag()) {
    if (Math.floor(tag / 8) === 1 && r.is(tag, LEN)) domain = utf8(r);
    else if (Math.floor(tag / 8) === 2 && r.is(tag, LEN)) r.pos = r.length();
    else if (Math.floor(tag / 8) > 2) r.skip(tag % 8);
  }
  return r.problem === undefined ? domain : undefined;
}
