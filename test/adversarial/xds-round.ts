/** The xDS fuzz arena: Tollgate (CONFIG_TYPE=GRPC_XDS_SOTW) connects to the hostile server's switchboard. A
 * round sets a random policy of transports (good, wrong TLS, garbage, hang, reset…) and a few stream behaviours,
 * cuts every connection so Tollgate reconnects into them, and lets it run. The restore after each round cuts
 * everything again and serves only the canonical config under a fresh version over the good transport: Tollgate
 * must reconnect and ACK it (then the known descriptor is checked against it). The ledger's findings become the
 * round's wrong answers. */
import type http2 from 'node:http2';
import { RLC_TYPE } from '../helpers/ads-server.js';
import { parseMetrics } from '../helpers/metrics.js';
import { bounded } from '../helpers/time.js';
import type { Rng } from './fuzz-lib.js';
import type { RoundContext } from './soak-lib.js';
import { BEHAVIOURS, type Behaviour, canonicalConfig, Names } from './xds-behaviours.js';
import { ADS_PATH, AdsStream, readRequests, Switchboard, type TlsFiles, type Transport } from './xds-hostile.js';
import { Ledger } from './xds-ledger.js';

export const NODE_ID = 'fuzz-node';
/** How long Tollgate may take to reconnect and ACK the canonical config (its backoff is at most 400 ms here). */
const RESTORE_MS = 20_000;

const HOSTILE_PLAIN: Transport[] = ['tls', 'garbage', 'trickle', 'hang', 'close', 'reset'];
const HOSTILE_TLS: Transport[] = ['h2', 'tls-wrong-ca', 'tls-wrong-name', 'tls-client-cert', 'garbage', 'trickle', 'hang', 'close', 'reset'];

type Mode = { kind: 'restore'; version: string } | { kind: 'attack'; ctx: RoundContext; behaviours: [string, Behaviour][] };

/** FUZZ_BEHAVIOURS=hugeStrings,flood narrows the stream behaviours to those named (to reproduce a finding). */
const only = process.env.FUZZ_BEHAVIOURS?.split(',').filter(Boolean);
const BEHAVIOUR_NAMES = Object.keys(BEHAVIOURS).filter((n) => !only || only.includes(n));

export class XdsArena {
  readonly ledger = new Ledger(NODE_ID);
  private readonly names = new Names();
  private readonly board: Switchboard;
  private mode: Mode = { kind: 'restore', version: '' };
  private reported = { kept: 0, count: 0, acks: 0, nacks: 0 };

  constructor(
    private readonly r: Rng,
    private readonly tls: TlsFiles | undefined,
  ) {
    this.board = new Switchboard(r, (h2, headers) => this.stream(h2, headers), tls);
  }

  /** The good transport: what Tollgate was configured for. */
  private get good(): Transport {
    return this.tls ? 'tls' : 'h2';
  }

  start(): Promise<number> {
    return this.board.start();
  }

  stop(): Promise<void> {
    return this.board.stop();
  }

  private stream(h2: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders): void {
    const s = new AdsStream(h2, this.ledger);
    if (headers[':path'] !== ADS_PATH) {
      this.ledger.problem(`a request to ${String(headers[':path']).slice(0, 100)}, not the ADS method`);
      s.end(12);
      return;
    }
    readRequests(h2, (req) => {
      this.ledger.request(s.record, req);
      s.onRequest?.(req);
    });
    const mode = this.mode;
    if (mode.kind === 'restore') {
      // As go-control-plane's snapshot cache: a stream whose first request has another version gets the snapshot.
      s.onRequest = (req) => {
        s.onRequest = undefined;
        if (req.version_info !== mode.version)
          s.send(
            { version_info: mode.version, resources: [{ type_url: RLC_TYPE, value: canonicalConfig() }], type_url: RLC_TYPE, nonce: this.names.nonce() },
            'ack',
          );
      };
      return;
    }
    const { r } = mode.ctx;
    const [name, behaviour] = r.pick(mode.behaviours);
    mode.ctx.count(`xds stream: ${name}`);
    // Most behaviours answer the stream's first request, as a server does; some act before it arrives.
    const light = mode.ctx.light;
    if (r.chance(0.2)) behaviour(s, r, this.names, this.ledger, light);
    else
      s.onRequest = () => {
        s.onRequest = undefined;
        behaviour(s, r, this.names, this.ledger, light);
      };
  }

  /** One attack round: a policy of transports and a few behaviours, for ctx.ms. */
  async round(ctx: RoundContext): Promise<void> {
    const { r } = ctx;
    const hostile = this.tls ? HOSTILE_TLS : HOSTILE_PLAIN;
    const transports = Array.from({ length: r.between(1, 3) }, () => r.pick(hostile));
    const goodShare = r.pick([0, 0.3, 0.7, 1]);
    const chosen = Array.from({ length: r.between(1, 3) }, () => r.pick(BEHAVIOUR_NAMES));
    this.mode = { kind: 'attack', ctx, behaviours: chosen.map((n) => [n, BEHAVIOURS[n]!]) };
    this.board.policy = (pr) => {
      const how = pr.chance(goodShare) ? this.good : pr.pick(transports);
      ctx.count(`xds connection: ${how}`);
      return how;
    };
    ctx.label = `${Math.round(goodShare * 100)}% good, else ${transports.join('/')}; streams: ${chosen.join('/')}`;
    // Every connection cut now and then (a stream reset by the network), so Tollgate reconnects into the
    // policy again instead of waiting out a hung one for the whole round.
    const until = Date.now() + ctx.ms;
    const cutEveryMs = r.pick([500, 1500, ctx.ms]);
    while (Date.now() < until) {
      this.board.cutAll();
      await new Promise((res) => setTimeout(res, Math.min(cutEveryMs, until - Date.now())));
    }
  }

  /** Everything cut, the canonical config served under a fresh version, and its ACK awaited: a problem, or
   * undefined once Tollgate has it (and says it is connected). */
  async restore(httpPort: number, index: number): Promise<string | undefined> {
    const version = `canon-${index}-${this.names.version(this.r)}`;
    const acked = this.ledger.acked(version);
    this.mode = { kind: 'restore', version };
    this.board.policy = () => this.good;
    this.board.cutAll();
    try {
      await bounded(acked, RESTORE_MS, 'the canonical config ACKed');
      return await connected(httpPort);
    } catch (err) {
      return `Tollgate did not come back to a good server: ${(err as Error).message}`;
    }
  }

  /** The ledger's findings since the last report, as the round's wrong answers (all counted, the first kept). */
  report(ctx: RoundContext): void {
    ctx.count('xds ACKs', this.ledger.acks - this.reported.acks);
    ctx.count('xds NACKs', this.ledger.nacks - this.reported.nacks);
    const kept = this.ledger.problems.slice(this.reported.kept);
    for (const problem of kept) ctx.wrong.add({ index: ctx.index, kind: 'xDS protocol', problem });
    ctx.wrong.count += this.ledger.problemCount - this.reported.count - kept.length;
    this.reported = { kept: this.ledger.problems.length, count: this.ledger.problemCount, acks: this.ledger.acks, nacks: this.ledger.nacks };
  }
}

/** tollgate_xds_connected is 1 (a stream up, its channel ready), within 5 s of the ACK. */
async function connected(httpPort: number): Promise<string | undefined> {
  const until = Date.now() + 5000;
  while (Date.now() < until) {
    const series = await fetch(`http://127.0.0.1:${httpPort}/metrics`, { signal: AbortSignal.timeout(5000) })
      .then(async (res) => parseMetrics(await res.text()))
      .catch(() => new Map<string, number>());
    if (series.get('tollgate_xds_connected') === 1) return undefined;
    await new Promise((res) => setTimeout(res, 50));
  }
  return 'tollgate_xds_connected is not 1 after the canonical config was ACKed';
}
