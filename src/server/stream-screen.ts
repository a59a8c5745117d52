import type { IncomingHttpHeaders, ServerHttp2Stream } from 'node:http2';
import { status } from '@grpc/grpc-js';
import { respondStatus, timeoutMs } from './h2-unary.js';

/** What a stream's headers must be before grpc-js sees them (RLQS, health, and every method under
 * GRPC_SERVER=grpc-js). grpc-js 1.14 echoes an unreadable grpc-timeout and an unknown grpc-encoding in its
 * grpc-message (server-interceptors.js), and writes a header it cannot take into its log with its value
 * (Metadata.fromHttp2Headers); it keeps a unary call without grpc-timeout while its connection lives, and inflates
 * without a budget (grpc-js-inflate.ts bounds that). Here each is answered or mended first, so no request text
 * reaches an answer or a log, and a unary call gets the server's deadline. */

export interface ScreenLimits {
  defaultDeadlineMs: number;
  /** Paths of streaming methods: their streams live as long as their client wants, and get no deadline. */
  streaming: ReadonlySet<string>;
}

/** grpc-js's own rules for a metadata key and a text value (metadata.js). */
const LEGAL_KEY = /^[0-9a-z_.-]+$/;
const LEGAL_TEXT = /^[ -~]*$/;
const ENCODINGS = new Set(['identity', 'gzip', 'deflate']);

/** True when the stream may go on to grpc-js; false when it was answered here. */
export function screenStream(stream: ServerHttp2Stream, headers: IncomingHttpHeaders, limits: ScreenLimits): boolean {
  const timeout = headers['grpc-timeout'];
  if (timeout !== undefined && timeoutMs(timeout) === undefined) {
    respondStatus(stream, status.INTERNAL, `Invalid grpc-timeout value (${String(timeout).length} characters)`);
    return false;
  }
  if (timeout === undefined && !limits.streaming.has(String(headers[':path']))) headers['grpc-timeout'] = `${limits.defaultDeadlineMs}m`;
  dropIllegalHeaders(headers);
  const encoding = headers['grpc-encoding'];
  if (encoding === undefined || (typeof encoding === 'string' && ENCODINGS.has(encoding))) return true;
  const name = typeof encoding === 'string' ? `a ${encoding.length}-character encoding` : 'no encoding';
  respondStatus(stream, status.UNIMPLEMENTED, `Received message compressed with unsupported encoding (${name})`);
  return false;
}

/** Headers grpc-js would refuse, and log with their values, are dropped unread (pseudo-headers are its own). */
function dropIllegalHeaders(headers: IncomingHttpHeaders): void {
  for (const key of Object.keys(headers)) {
    if (key.charCodeAt(0) === 58 /* : */) continue;
    if (!LEGAL_KEY.test(key)) {
      delete headers[key];
      continue;
    }
    if (key.endsWith('-bin')) continue; // base64, which grpc-js reads without refusing
    const value = headers[key];
    const values = Array.isArray(value) ? value : [value];
    if (values.some((v) => typeof v === 'string' && !LEGAL_TEXT.test(v))) delete headers[key];
  }
}
