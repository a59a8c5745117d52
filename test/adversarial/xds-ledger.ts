/** What the hostile management server sent and what Tollgate answered, judged by the xDS protocol's rules
 * (Envoy's "xDS REST and gRPC protocol" doc, and Envoy's grpc_mux_impl.cc as docs/xds.md cites it):
 *  - a stream's first request names the node, carries no nonce, and says the version applied ('' before any);
 *  - every later request names a nonce sent on that stream, once;
 *  - an ACK carries the version of the response it acknowledges, a NACK (error_detail) the version applied
 *    before it, never the rejected one;
 *  - a response of a type not subscribed to is neither ACKed nor NACKed;
 *  - a config the generator made valid is never NACKed, one it made invalid never ACKed.
 * Versions and nonces are unique in a run, so each names one response. */

/** What the generator knows of a response: whether it must be ACKed, NACKed, either, or left unanswered. */
export type Expect = 'ack' | 'nack' | 'either' | 'none';

export interface DiscoveryRequest {
  version_info: string;
  node: { id: string } | null;
  type_url: string;
  response_nonce: string;
  error_detail: { code: number; message: string } | null;
}

interface Sent {
  version: string;
  expect: Expect;
  answered: boolean;
}

export class AdsStreamRecord {
  readonly sent = new Map<string, Sent>();
  requests = 0;
}

export class Ledger {
  /** Versions Tollgate may have applied: sent in a response it had to, or could, ACK. */
  private readonly applicable = new Set<string>(['']);
  readonly problems: string[] = [];
  problemCount = 0;
  acks = 0;
  nacks = 0;
  private readonly ackWaiters = new Map<string, () => void>();

  constructor(private readonly nodeId: string) {}

  /** A response about to be written on `stream`. */
  sent(stream: AdsStreamRecord, nonce: string, version: string, expect: Expect): void {
    stream.sent.set(nonce, { version, expect, answered: false });
    if (expect === 'ack' || expect === 'either') this.applicable.add(version);
  }

  /** Resolves when a request ACKs `version` (restore: the canonical config is applied). */
  acked(version: string): Promise<void> {
    return new Promise((resolve) => this.ackWaiters.set(version, resolve));
  }

  /** One request Tollgate sent on `stream`, judged. */
  request(stream: AdsStreamRecord, req: DiscoveryRequest): void {
    const first = stream.requests++ === 0;
    const version = shown(req.version_info);
    if (first) {
      if (req.response_nonce !== '') this.problem(`a stream's first request names nonce ${shown(req.response_nonce)}`);
      if (req.node?.id !== this.nodeId) this.problem(`a stream's first request names node ${shown(req.node?.id ?? '(none)')}`);
      if (!this.applicable.has(req.version_info)) this.problem(`a stream opened saying version ${version} is applied, which was never sent as valid`);
      return;
    }
    const sent = stream.sent.get(req.response_nonce);
    const nonce = shown(req.response_nonce);
    if (!sent) {
      this.problem(`a request names nonce ${nonce}, never sent on its stream`);
      return;
    }
    if (sent.answered) {
      this.problem(`nonce ${nonce} answered twice`);
      return;
    }
    sent.answered = true;
    if (sent.expect === 'none') {
      this.problem(`a response of a type not subscribed to was answered (nonce ${nonce})`);
      return;
    }
    if (req.error_detail) {
      this.nacks++;
      if (sent.expect === 'ack') this.problem(`a valid config was NACKed: ${shown(req.error_detail.message)}`);
      if (req.version_info === sent.version) this.problem(`a NACK carries the rejected version ${version}`);
      else if (!this.applicable.has(req.version_info)) this.problem(`a NACK carries version ${version}, never sent as valid`);
      return;
    }
    this.acks++;
    if (sent.expect === 'nack') this.problem(`an invalid config was ACKed (version ${shown(sent.version)})`);
    if (req.version_info !== sent.version) this.problem(`an ACK of version ${shown(sent.version)} carries version ${version}`);
    this.ackWaiters.get(req.version_info)?.();
    this.ackWaiters.delete(req.version_info);
  }

  problem(text: string): void {
    this.problemCount++;
    if (this.problems.length < 50) this.problems.push(text);
  }
}

/** A server string in a finding: its start, printable, and its length. */
export function shown(text: string): string {
  const clean = text.slice(0, 80).replace(/[^\x20-\x7e]/g, '?');
  return text.length > 80 ? `"${clean}…" (${text.length} characters)` : `"${clean}"`;
}
