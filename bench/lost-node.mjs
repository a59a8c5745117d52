// How long the in-flight slots of an Envoy whose node was lost stay held (docs/in-flight.md "Long streams"): an
// emulated Envoy (test/helpers/envoy-emulator.mjs) takes a tenant's 2 slots on a max_hold rule, then is frozen
// with SIGSTOP, so its connection stays open with no FIN and answers no PING. Tollgate's HTTP/2 keepalive
// (server/port-bounds.ts) ends the connection; its slots then end within a lease. Prints the time until a
// probe gets a slot. Runs against dist/ (npm run build), on the memory store, on 127.0.0.1, and stops itself.
//   node bench/lost-node.mjs [--lease 3s]
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import http2 from 'node:http2';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { descriptor, rlsMessage, unary } from '../test/adversarial/rls-wire.mjs';

const lease = process.argv.includes('--lease') ? process.argv[process.argv.indexOf('--lease') + 1] : '3s';
const dir = mkdtempSync(join(tmpdir(), 'lost-node-'));
writeFileSync(
  join(dir, 'llm.yaml'),
  `domain: llm\ndescriptors:\n  - key: tenant\n    in_flight: {limit: 2, lease: ${lease}, max_hold: 10m, request_key: request_id}\n`,
);
const port = 20_000 + Math.floor(Math.random() * 20_000);
const args = ['dist/cli.js', 'serve', '--config', dir, '--grpc-port', String(port), '--http-port', '0', '--grpc-host', '127.0.0.1', '--http-host', '127.0.0.1'];
const service = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'inherit'] });
const envoy = spawn(process.execPath, ['test/helpers/envoy-emulator.mjs', String(port), 'frozen', 'llm', 'acme', 'a1,a2']);
const stop = () => {
  envoy.kill('SIGKILL');
  service.kill('SIGKILL');
};
setTimeout(() => {
  console.log('still held after 3 minutes');
  stop();
}, 180_000).unref();
try {
  await new Promise((resolve) => service.stdout.on('data', (d) => /serving/.test(d) && resolve()));
  await new Promise((resolve) => envoy.stdout.on('data', (d) => /taken/.test(d) && resolve()));
  envoy.kill('SIGSTOP');
  const start = Date.now();
  for (;;) {
    const s = http2.connect(`http://127.0.0.1:${port}`);
    s.on('error', () => undefined);
    const r = await unary(
      s,
      rlsMessage('llm', [
        descriptor(
          [
            ['tenant', 'acme'],
            ['request_id', `probe-${Date.now()}`],
          ],
          1,
        ),
      ]),
    );
    s.close();
    if (r.answer?.overall === 1) break;
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
  console.log(`lease ${lease}: the frozen Envoy's slots were free ${Date.now() - start} ms after it froze`);
} finally {
  stop();
}
