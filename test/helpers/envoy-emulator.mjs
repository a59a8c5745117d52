// An Envoy's rate-limit client as in-flight slots see it, run as a process of its own so that a test can kill it:
// its HTTP/2 connection to a Tollgate replica, kept open while it lives (Envoy's per-worker pool); the
// x-tollgate-peer header on every call (its GrpcService's initial_metadata); a take per request id at the request
// phase; the give-back Envoy sends when a stream is done (ratelimit.cc, apply_on_stream_done, is_negative_hits);
// and its other traffic: a check (hits_addend 0) every 500 ms. When a replica sends GOAWAY or goes away, the next
// call opens a connection to the next port, as Envoy's pool does.
//
//   node envoy-emulator.mjs PORTS PEER DOMAIN TENANT IDS
//     PORTS: replica gRPC ports, comma-separated; IDS: request ids to take slots for, comma-separated
//   stdin:  "give ID" sends that id's give-back
//   stdout: one JSON line per event: {"taken": [codes]}, {"gave": code}, {"connected": port}
// It exits by itself after 3 minutes.

import { connect, descriptor, OK, rlsMessage, unary } from '../adversarial/rls-wire.mjs';

const [portList, peer, domain, tenant, idList] = process.argv.slice(2);
const ports = portList.split(',').map(Number);
const ids = idList ? idList.split(',') : [];
const headers = { 'x-tollgate-peer': peer };
const say = (o) => process.stdout.write(`${JSON.stringify(o)}\n`);
setTimeout(() => process.exit(0), 180_000).unref();

let turn = 0;
let session;
let connecting;

/** The connection calls go on: the open one, else one to the next port that answers. */
async function current() {
  if (session && !session.closed && !session.destroyed && !session.draining) return session;
  connecting ??= (async () => {
    for (;;) {
      const port = ports[turn++ % ports.length];
      const s = await connect(port);
      if (s) {
        s.on('goaway', () => (s.draining = true));
        session = s;
        say({ connected: port });
        return s;
      }
      await new Promise((r) => setTimeout(r, 100));
    }
  })().finally(() => (connecting = undefined));
  return connecting;
}

const call = async (id, hits, negative = false) => {
  for (let attempt = 0; attempt < 20; attempt++) {
    const r = await unary(
      await current(),
      rlsMessage(domain, [
        descriptor(
          [
            ['tenant', tenant],
            ['request_id', id],
          ],
          hits,
          negative,
        ),
      ]),
      headers,
    );
    if (r.status === '0') return r.answer.overall;
    session.draining = true; // refused as a replica stopped: the next connection
  }
  return -1;
};

say({ taken: await Promise.all(ids.map((id) => call(id, 1))) });
setInterval(() => void call('check', 0), 500);

let buffered = '';
process.stdin.on('data', async (d) => {
  buffered += d;
  for (let nl = buffered.indexOf('\n'); nl >= 0; nl = buffered.indexOf('\n')) {
    const line = buffered.slice(0, nl).trim();
    buffered = buffered.slice(nl + 1);
    const [what, id] = line.split(' ');
    if (what === 'give') say({ gave: (await call(id, 1, true)) === OK ? 'OK' : 'not OK' });
  }
});
