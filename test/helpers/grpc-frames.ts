import type http2 from 'node:http2';

/** A raw HTTP/2 call's grpc-status (from a trailers-only answer or the trailers), or `rst N` when it closed
 * without one. */
export function streamStatus(req: http2.ClientHttp2Stream): Promise<string> {
  return new Promise((resolve) => {
    const read = (h: http2.IncomingHttpHeaders): void => {
      if (h['grpc-status'] !== undefined) resolve(String(h['grpc-status']));
    };
    req.on('response', read);
    req.on('trailers', read);
    req.on('data', () => undefined);
    req.on('error', () => undefined);
    req.on('close', () => resolve(`rst ${req.rstCode}`));
  });
}

/** Counts whole gRPC messages in a stream's bytes (a 5-byte header, then its length of bytes) without keeping
 * them, so a test that reads many answers stays light beside the server it measures. */
export class MessageCounter {
  messages = 0;
  private header = Buffer.alloc(0);
  private left = 0;

  add(d: Buffer): void {
    let i = 0;
    while (i < d.length) {
      if (this.left > 0) {
        const take = Math.min(this.left, d.length - i);
        this.left -= take;
        i += take;
        if (this.left === 0) this.messages++;
        continue;
      }
      const take = Math.min(5 - this.header.length, d.length - i);
      this.header = Buffer.concat([this.header, d.subarray(i, i + take)]);
      i += take;
      if (this.header.length < 5) continue;
      this.left = this.header.readUInt32BE(1);
      this.header = Buffer.alloc(0);
      if (this.left === 0) this.messages++;
    }
  }
}
