/** The process a round-based fuzzer attacks: a real `node dist/cli.js serve` on free loopback ports, logging at
 * trace. Its stdout and stderr are scanned for the marker as they arrive and measured (bytes, lines, the longest
 * line), never kept whole; its resident memory is read from /proc. A crash is the process gone. */
import { type ChildProcess, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { freePort, loopback } from '../helpers/process.js';
import type { RedisServer } from '../helpers/redis.js';
import type { LeakScanner } from './fuzz-lib.js';

/** What the service wrote, so far. */
export interface LogVolume {
  bytes: number;
  lines: number;
  /** The longest line, in bytes. */
  longest: number;
}

export class SoakProcess {
  private readonly volume: LogVolume = { bytes: 0, lines: 0, longest: 0 };
  private lineBytes = 0;
  private head = '';

  private constructor(
    readonly name: string,
    private readonly child: ChildProcess,
    readonly grpcPort: number,
    readonly httpPort: number,
    readonly redis: RedisServer | undefined,
  ) {}

  /** Starts `serve` with `args` (ports and hosts added) and waits for its "tollgate serving" line. */
  static async start(name: string, args: string[], scanner: LeakScanner, redis?: RedisServer, env: NodeJS.ProcessEnv = {}): Promise<SoakProcess> {
    const [grpcPort, httpPort] = [await freePort(), await freePort()];
    const child = spawn(process.execPath, ['dist/cli.js', 'serve', ...args, ...loopback(grpcPort, httpPort)], {
      env: { ...process.env, LOG_LEVEL: 'trace', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    // A test that times out never reaches close(): the service must not outlive the test process.
    const orphan = (): void => void child.kill('SIGKILL');
    process.once('exit', orphan);
    child.once('exit', () => process.off('exit', orphan));
    const p = new SoakProcess(name, child, grpcPort, httpPort, redis);
    const scanOut = scanner.stream('log');
    const scanErr = scanner.stream('stderr');
    child.stdout!.on('data', (d: Buffer) => p.output(d, scanOut));
    child.stderr!.on('data', (d: Buffer) => p.output(d, scanErr));
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`${name}: not serving within 20 s:\n${p.head}`)), 20_000);
      const ready = (): void => {
        if (!p.head.includes('tollgate serving')) return;
        clearTimeout(timer);
        child.stdout!.off('data', ready);
        resolve();
      };
      child.stdout!.on('data', ready);
      child.once('exit', (code, signal) => {
        clearTimeout(timer);
        reject(new Error(`${name}: exited (${code ?? signal}) before serving:\n${p.head}`));
      });
    });
    return p;
  }

  private output(d: Buffer, scan: (chunk: string) => void): void {
    scan(d.toString('latin1'));
    if (this.head.length < 20_000) this.head += d.toString();
    this.volume.bytes += d.length;
    let from = 0;
    for (let at = d.indexOf(10); at !== -1; at = d.indexOf(10, from)) {
      this.endLine(this.lineBytes + at - from);
      this.lineBytes = 0;
      from = at + 1;
    }
    this.lineBytes += d.length - from;
  }

  private endLine(bytes: number): void {
    this.volume.lines++;
    this.volume.longest = Math.max(this.volume.longest, bytes);
  }

  get pid(): number {
    return this.child.pid!;
  }

  /** What was written since the start (a copy: subtract two to get a round's). */
  logVolume(): LogVolume {
    return { ...this.volume, longest: Math.max(this.volume.longest, this.lineBytes) };
  }

  alive(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null;
  }

  /** How it ended, for the failure message. */
  exitStatus(): string {
    return `exit code ${this.child.exitCode}, signal ${this.child.signalCode}`;
  }

  /** Resident memory in MiB (VmRSS), or NaN once the process is gone. */
  rssMb(): number {
    try {
      const kb = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${this.pid}/status`, 'utf8'))?.[1];
      return kb === undefined ? Number.NaN : Number(kb) / 1024;
    } catch {
      return Number.NaN;
    }
  }

  async close(): Promise<void> {
    if (this.alive()) {
      const exited = new Promise((r) => this.child.once('exit', r));
      this.child.kill('SIGTERM');
      const timer = setTimeout(() => this.child.kill('SIGKILL'), 15_000);
      await exited;
      clearTimeout(timer);
    }
    await this.redis?.stop();
  }
}

/** Samples a process's RSS every 100 ms while a round runs, keeping the highest. */
export class RssSampler {
  peak = 0;
  private readonly timer: NodeJS.Timeout;

  constructor(private readonly read: () => number) {
    this.sample();
    this.timer = setInterval(() => this.sample(), 100);
  }

  private sample(): void {
    const mb = this.read();
    if (mb > this.peak) this.peak = mb;
  }

  stop(): number {
    clearInterval(this.timer);
    this.sample();
    return this.peak;
  }
}
