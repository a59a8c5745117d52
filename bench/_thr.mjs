import { spawn } from 'node:child_process';
import { readFileSync, readdirSync, mkdtempSync, copyFileSync } from 'node:fs';
import { tmpdir } from 'node:os'; import { join } from 'node:path';
import { freePort, h2load } from './bench-lib.mjs';
const [what] = process.argv.slice(2);
const dir = mkdtempSync(join(tmpdir(), 'cfg-')); for (const f of readdirSync('config')) if (/\.ya?ml$/.test(f)) copyFileSync(join('config', f), join(dir, f)); copyFileSync('bench/bench-domain.yaml', join(dir, 'bench.yaml'));
const port = await freePort(); const http = await freePort();
let redis;
const extra = [];
if (what.startsWith('redis')) {
  const rport = await freePort();
  redis = spawn('redis-server', ['--port', String(rport), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { stdio: 'ignore' });
  await new Promise((r) => setTimeout(r, 300));
  extra.push('--store', 'redis', '--redis-url', `redis://127.0.0.1:${rport}`);
}
const args = what === 'raw' ? ['bench/raw-noop.mjs', String(port)] : what === 'raw2' ? ['bench/_raw2.mjs', String(port)] : what === 'raw3' ? ['bench/_raw3.mjs', String(port)] : what === 'noop' ? ['bench/noop-rls.mjs', String(port)] :
  ['dist/cli.js', 'serve', '--config', dir, '--grpc-port', String(port), '--http-port', String(http), '--grpc-host', '127.0.0.1', '--http-host', '127.0.0.1', '--config-poll-ms', '0', ...extra];
const child = spawn(process.execPath, [...(process.env.NODEFLAGS ? process.env.NODEFLAGS.split(' ') : []), ...args], { env: { ...process.env, ...(what.startsWith('stub') ? { TG_STUB: what === 'stub' ? '1' : 'decode' } : {}), ...(what === 'redishop' ? { TG_HOP: '1' } : {}) }, stdio: ['ignore', 'pipe', 'pipe'] });
let out = ''; let ready; const up = new Promise((r) => (ready = r));
child.stdout.on('data', (d) => { out += d; if (process.env.DUMP) process.stderr.write(d); if (/serving/.test(out)) ready(); });
await up;
const threads = () => Object.fromEntries(readdirSync(`/proc/${child.pid}/task`).map((t) => { const s = readFileSync(`/proc/${child.pid}/task/${t}/stat`, 'utf8'); const name = s.slice(s.indexOf('(') + 1, s.lastIndexOf(')')); const f = s.slice(s.lastIndexOf(')') + 2).split(' '); return [`${t}:${name}`, Number(f[11]) + Number(f[12])]; }));
await h2load(`127.0.0.1:${port}`, { requests: 20000 });
const a = threads(); const t0 = Date.now();
const r = await h2load(`127.0.0.1:${port}`, { seconds: 5 });
const rc = redis ? Number(readFileSync(`/proc/${redis.pid}/stat`, 'utf8').split(') ')[1].split(' ')[11]) + Number(readFileSync(`/proc/${redis.pid}/stat`, 'utf8').split(') ')[1].split(' ')[12]) : 0;
const b = threads(); const wall = (Date.now() - t0) / 1000;
const rows = Object.keys(b).map((k) => [k, ((b[k] - (a[k] ?? 0)) / 100 / wall * 100).toFixed(0) + '%']).filter((x) => x[1] !== '0%');
console.log('redis-server total ticks', rc); console.log(what, r.perSecond, 'req/s', JSON.stringify(rows));
child.kill('SIGTERM'); redis?.kill('SIGTERM');
