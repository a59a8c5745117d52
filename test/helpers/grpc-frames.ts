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
