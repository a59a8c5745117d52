import { type ChildProcess, spawn } from 'node:child_process';
import { createServer } from 'node:net';

export const CLI = 'dist/cli.js';

/** A port that was free a moment ago (for child processes that need a fixed port). */
/** Ports this process has handed out: the OS may give a closed port again at once, and two servers started
 * together (a replica's gRPC port, another's HTTP port) would then race for it ("already in use"). */
const handedOut = new Set<number>();

export async function freePort(): Promise<number> {
  for (let attempt = 0; attempt < 50; attempt++) {
    const port = await new Promise<number>((resolve, reject) => {
      const s = createServer();
      s.once('error', reject);
      s.listen(0, '127.0.0.1', () => {
        const { port: p } = s.address() as { port: number };
        s.close(() => resolve(p));
      });
    });
    if (handedOut.has(port)) continue;
    handedOut.add(port);
    return port;
  }
  throw new Error('no free port not already handed out in 50 attempts');
}

export interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs the CLI to completion (bounded by a timeout). */
export function runCli(args: string[], env: NodeJS.ProcessEnv = {}, timeoutMs = 15_000): Promise<Run> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [CLI, ...args], { env: { ...process.env, ...env }, timeout: timeoutMs });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d));
    child.stderr.on('data', (d: Buffer) => (stderr += d));
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

export interface Daemon {
  child: ChildProcess;
  output: () => string;
  exited: Promise<number | null>;
}

/** Starts a long-running CLI command (with `nodeFlags` before the script) and waits until its output matches `ready`. */
export async function startCli(args: string[], ready: RegExp, env: NodeJS.ProcessEnv = {}, nodeFlags: readonly string[] = []): Promise<Daemon> {
  const child = spawn(process.execPath, [...nodeFlags, CLI, ...args], { env: { ...process.env, ...env } });
  let out = '';
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`not ready in time:\n${out}`)), 15_000);
    const onData = (d: Buffer): void => {
      out += d;
      if (ready.test(out)) {
        clearTimeout(timer);
        resolve();
      }
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', onData);
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`exited with ${code} before ready:\n${out}`));
    });
  });
  return { child, output: () => out, exited };
}

/** Serve flags that bind gRPC and HTTP on loopback at these ports. */
export function loopback(grpcPort: number, httpPort: number): string[] {
  return ['--grpc-host', '127.0.0.1', '--http-host', '127.0.0.1', '--grpc-port', String(grpcPort), '--http-port', String(httpPort)];
}
