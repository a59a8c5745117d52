import { isUtf8 } from 'node:buffer';
import type { IncomingMessage, ServerResponse } from 'node:http';

export function send(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text), ...headers });
  res.end(text);
}

/** Answers a failed call with a status and a message (and counts it, where the caller does). */
export type Refuse = (status: number, error: string) => void;

const MAX_BODY_BYTES = 1024 * 1024;

/** The parsed JSON body, or undefined after answering 415 (not application/json), 413 (over the bound)
 * or 400 (not UTF-8, not JSON). Bytes are checked for UTF-8 before decoding: decoding would replace bad
 * bytes with U+FFFD, and distinct invalid tokens would share one counter. `anyType`: the body is read as
 * JSON whatever its content type says (or without one), as envoyproxy/ratelimit's /json handler reads it
 * (src/server/server_impl.go, NewJsonHandler, never looks at the header; the example in its comment is
 * `curl -XPOST --data @/dev/stdin`, which sends application/x-www-form-urlencoded). */
export async function readJsonBody(req: IncomingMessage, refuse: Refuse, opts: { anyType?: boolean } = {}): Promise<unknown> {
  if (!opts.anyType && !isJsonType(req.headers['content-type'])) {
    refuse(415, 'send the body as content-type: application/json');
    drain(req);
    return undefined;
  }
  const declared = Number(req.headers['content-length'] ?? 0);
  const bytes = declared > MAX_BODY_BYTES ? 'too large' : await collect(req, MAX_BODY_BYTES);
  if (bytes === 'aborted') return undefined;
  if (bytes === 'too large') {
    refuse(413, `body is larger than ${MAX_BODY_BYTES} bytes`);
    drain(req);
    return undefined;
  }
  if (!isUtf8(bytes)) {
    refuse(400, 'body is not valid UTF-8');
    return undefined;
  }
  try {
    return JSON.parse(bytes.toString('utf8')) as unknown;
  } catch {
    refuse(400, 'body is not valid JSON');
    return undefined;
  }
}

/** Reads and drops the rest of a refused body: closing with bytes unread would reset the connection, and a
 * client still writing could lose the answer. Bounded: past 16 MiB or 5 seconds the connection is cut. */
function drain(req: IncomingMessage): void {
  if (req.readableEnded) return;
  let dropped = 0;
  const timer = setTimeout(() => req.destroy(), 5000).unref();
  req.on('data', (chunk: Buffer) => {
    dropped += chunk.length;
    if (dropped > 16 * 1024 * 1024) req.destroy();
  });
  req.once('end', () => clearTimeout(timer));
  req.once('close', () => clearTimeout(timer));
}

/** application/json, in any case, with or without parameters such as charset. */
function isJsonType(header: string | undefined): boolean {
  return (header ?? '').split(';')[0]!.trim().toLowerCase() === 'application/json';
}

/** The body; 'too large' as soon as it grows past `max` (the rest is left to drain()); 'aborted' when
 * the client goes away first. */
function collect(req: IncomingMessage, max: number): Promise<Buffer | 'too large' | 'aborted'> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const onData = (chunk: Buffer): void => {
      size += chunk.length;
      if (size <= max) return void chunks.push(chunk);
      req.off('data', onData);
      req.pause();
      resolve('too large');
    };
    req.on('data', onData);
    req.once('end', () => resolve(Buffer.concat(chunks)));
    // After 'end' these change nothing: a promise settles once.
    req.once('error', () => resolve('aborted'));
    req.once('close', () => resolve('aborted'));
  });
}
