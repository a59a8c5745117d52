import { closeSync, fstatSync, openSync, readSync } from 'node:fs';
import { ConfigError, fileProblem } from './errors.js';
import { parseOverlay } from './overlay.js';
import { OPEN_FLAGS } from './read-dir.js';
import type { OverlayText } from './reload-worker.js';

/** XDS_OVERLAY_FILE, watched: read whole at start (a bad one stops the start, as a bad config directory
 * does) and again whenever it changes, bounded by --max-config-bytes. Each change is handed to the xDS
 * sources, which apply it to their last resources on the reader thread, validated as any config: a bad
 * change is rejected there and the last good config stays. A file that cannot be read later keeps the last
 * text and is reported once. */
export class OverlayFile {
  private text: OverlayText;
  private stamp: string;
  private timer: NodeJS.Timeout | undefined;
  private unreadable: string | undefined;
  private readonly listeners: (() => void)[] = [];

  constructor(
    private readonly file: string,
    private readonly maxBytes: number,
    private readonly report: (problem: string | undefined) => void,
  ) {
    const first = readOverlay(file, maxBytes);
    if (typeof first === 'string') throw new ConfigError([fileProblem(file, 'UNREADABLE', first)]);
    parseOverlay(file, first.text!); // throws ConfigError with every problem, by line
    this.text = { file, text: first.text! };
    this.stamp = first.stamp;
  }

  get current(): OverlayText {
    return this.text;
  }

  onChange(listener: () => void): void {
    this.listeners.push(listener);
  }

  start(pollMs: number): void {
    if (pollMs <= 0) return;
    this.timer = setInterval(() => this.check(), pollMs);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
  }

  /** Re-reads the file if its inode, size or time changed; tells the sources when its text did. */
  check(): void {
    const read = readOverlay(this.file, this.maxBytes, this.stamp);
    if (typeof read === 'string') {
      if (read !== this.unreadable) this.report(read);
      this.unreadable = read;
      return;
    }
    if (this.unreadable !== undefined) this.report(undefined);
    this.unreadable = undefined;
    if (read.text === undefined) return; // the same file as last read: not read again
    this.stamp = read.stamp;
    if (read.text === this.text.text) return;
    this.text = { file: this.file, text: read.text };
    for (const l of this.listeners) l();
  }
}

/** The file's text, unless its stamp is `unless` (then only the stamp), or why it cannot be read. Opened without
 * blocking (a FIFO would otherwise hold the event loop until a writer came) and read only when a regular file
 * within the bound. */
function readOverlay(file: string, maxBytes: number, unless?: string): { text: string | undefined; stamp: string } | string {
  let fd: number | undefined;
  try {
    fd = openSync(file, OPEN_FLAGS);
    const st = fstatSync(fd);
    if (!st.isFile()) return 'not a regular file';
    const stamp = `${st.ino}:${st.size}:${st.mtimeMs}`;
    if (stamp === unless) return { text: undefined, stamp };
    if (st.size > maxBytes) return `${st.size} bytes, more than the maximum of ${maxBytes} (--max-config-bytes)`;
    const buf = Buffer.alloc(st.size);
    const got = readSync(fd, buf, 0, st.size, 0);
    return { text: buf.subarray(0, got).toString('utf8'), stamp };
  } catch (err) {
    return `cannot read it (${(err as NodeJS.ErrnoException).code ?? 'error'})`;
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
}

/** check-config's read of an overlay: the same rules, a problem as a ConfigError. */
export function readOverlayText(file: string, maxBytes: number): string {
  const read = readOverlay(file, maxBytes);
  if (typeof read === 'string') throw new ConfigError([fileProblem(file, 'UNREADABLE', read)]);
  return read.text!;
}
