/** What the hostile management server does on one ADS stream: valid, invalid and random RateLimitConfig
 * resources, floods of responses, huge version_info and nonces, garbage and lying frames, oversize messages,
 * slow trickles, resets, GOAWAYs, random statuses with long messages, wrong headers, silence. Every response is
 * recorded in the ledger with what it expects (an ACK, a NACK, either, or no answer). */
import { encodeConfig, RLC_TYPE } from '../helpers/ads-server.js';
import type { Rng } from './fuzz-lib.js';
import { type AdsStream, type DiscoveryResponse, decodeResponse, encodeResponse, frameHeader } from './xds-hostile.js';
import type { Expect, Ledger } from './xds-ledger.js';

export const CHECK_DOMAIN = 'xds-check';
const UNITS = ['SECOND', 'MINUTE', 'HOUR', 'DAY', 'WEEK', 'MONTH', 'YEAR'];
const OTHER_TYPE = 'type.googleapis.com/envoy.config.cluster.v3.Cluster';

/** The config restored after every round: the known check's and the probe's hourly rules. */
export function canonicalConfig(): Uint8Array {
  return encodeConfig({
    name: CHECK_DOMAIN,
    domain: CHECK_DOMAIN,
    descriptors: [
      { key: 'check', rate_limit: { unit: 'HOUR', requests_per_unit: 5 } },
      { key: 'probe', rate_limit: { unit: 'HOUR', requests_per_unit: 1000 } },
    ],
  });
}

// biome-ignore lint/suspicious/noExplicitAny: RateLimitDescriptor as JSON, built field by field
function descriptors(r: Rng, depth: number): any[] {
  return Array.from({ length: r.between(1, 4) }, (_, i) => {
    // biome-ignore lint/suspicious/noExplicitAny: as above
    const d: any = { key: `k${depth}-${i}` }; // keys unique at each level: a duplicate is a config error
    if (r.chance(0.5)) d.value = `v${r.int(1000)}`;
    if (r.chance(0.7))
      d.rate_limit = r.chance(0.1) ? { unlimited: true } : { unit: r.pick(UNITS), requests_per_unit: r.between(1, 1_000_000), name: `n${r.int(1e6)}` };
    if (r.chance(0.1)) d.shadow_mode = true;
    if (depth < 3 && r.chance(0.3)) d.descriptors = descriptors(r, depth + 1);
    return d;
  });
}

/** `n` configs a file could hold, on distinct domains (the known check's among them, now and then). */
function validResources(r: Rng, n: number): { type_url: string; value: Uint8Array }[] {
  const start = r.int(1000);
  return Array.from({ length: n }, (_, i) => {
    const domain = i === 0 && r.chance(0.2) ? CHECK_DOMAIN : `fuzz-${start + i}`;
    return { type_url: RLC_TYPE, value: encodeConfig({ name: domain, domain, descriptors: descriptors(r, 0) }) };
  });
}

/** A resource every config check refuses (docs/xds.md): an unknown unit, another type, bytes that do not
 * decode, descriptors nested past 64 levels. */
function invalidResource(r: Rng): { type_url: string; value: Uint8Array } {
  switch (r.int(4)) {
    case 0:
      return {
        type_url: RLC_TYPE,
        value: encodeConfig({ name: 'bad', domain: 'bad', descriptors: [{ key: 'k', rate_limit: { unit: 'UNKNOWN', requests_per_unit: 1 } }] }),
      };
    case 1:
      return { type_url: OTHER_TYPE, value: encodeConfig({ name: 'x' }) };
    case 2:
      return { type_url: RLC_TYPE, value: Uint8Array.from([0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f]) };
    default: {
      let deep: Record<string, unknown> = { key: 'leaf', rate_limit: { unit: 'SECOND', requests_per_unit: 1 } };
      for (let i = 0; i < 80; i++) deep = { key: `k${i}`, descriptors: [deep] };
      return { type_url: RLC_TYPE, value: encodeConfig({ name: 'deep', domain: 'deep', descriptors: [deep] }) };
    }
  }
}

/** Unique versions and nonces (the ledger names responses by them), some huge. */
export class Names {
  private n = 0;
  version(r: Rng): string {
    return `v${++this.n}-${r.int(1e6)}`;
  }
  nonce(): string {
    return `n${++this.n}`;
  }
}

/** The resources of one response and what the answer must be. */
function responseBody(r: Rng, light: boolean): { resources: DiscoveryResponse['resources']; expect: Expect } {
  const roll = r.int(10);
  if (roll < 5) return { resources: validResources(r, r.between(1, 5)), expect: 'ack' };
  if (roll < 7) return { resources: [...validResources(r, r.between(0, 2)), invalidResource(r)], expect: 'nack' };
  if (roll < 8) return { resources: [], expect: 'ack' };
  if (roll < 9) return { resources: validResources(r, r.pick(light ? [20, 50] : [200, 1000])), expect: 'ack' };
  return { resources: [{ type_url: RLC_TYPE, value: Uint8Array.from(r.bytes(r.int(200))) }], expect: 'either' };
}

/** `light`: the smoke test's, with huge strings and messages cut down. */
export type Behaviour = (s: AdsStream, r: Rng, names: Names, ledger: Ledger, light: boolean) => void;

const later = (ms: number, f: () => void): void => void setTimeout(f, ms).unref();

/** Answers each request with a response (or two) now and then, as a live control plane would. */
const serve: Behaviour = (s, r, names, _ledger, light) => {
  const next = (): void => {
    if (!r.chance(0.9)) return;
    const { resources, expect } = responseBody(r, light);
    later(r.int(50), () => s.send({ version_info: names.version(r), resources, type_url: RLC_TYPE, nonce: names.nonce() }, expect));
  };
  s.onRequest = next;
  next();
};

const flood: Behaviour = (s, r, names) => {
  for (let i = r.between(20, 60); i > 0; i--)
    s.send({ version_info: names.version(r), resources: validResources(r, 1), type_url: RLC_TYPE, nonce: names.nonce() }, 'ack');
};

/** A valid config under a 1 MiB version, or with a 256 KiB nonce: server strings Tollgate logs and sends back. */
const hugeStrings: Behaviour = (s, r, names, _ledger, light) => {
  const version = r.chance(0.5) ? `${names.version(r)}-${'x'.repeat(light ? 2000 : 1024 * 1024)}` : names.version(r);
  const nonce = version.length > 1000 ? names.nonce() : `${names.nonce()}-${'n'.repeat(light ? 2000 : 256 * 1024)}`;
  s.send({ version_info: version, resources: validResources(r, 1), type_url: RLC_TYPE, nonce }, 'ack');
};

const otherType: Behaviour = (s, r, names) => {
  s.send(
    {
      version_info: names.version(r),
      resources: validResources(r, 1),
      type_url: 'type.googleapis.com/envoy.config.listener.v3.Listener',
      nonce: names.nonce(),
    },
    'none',
  );
};

/** Random bytes as a message: recorded for what they decode to, if they do. */
const garbageMessage: Behaviour = (s, r, _names, ledger) => {
  const body = Buffer.from(r.bytes(r.between(1, 300)));
  const decoded = tryDecode(body);
  if (decoded) ledger.sent(s.record, decoded.nonce, decoded.version_info, decoded.type_url === RLC_TYPE ? 'either' : 'none');
  s.write(Buffer.concat([frameHeader(body.length, r.chance(0.2) ? 1 : 0), body]));
};

/** A frame whose header declares more than follows, then the stream's end. */
const lyingLength: Behaviour = (s, r) => {
  s.write(Buffer.concat([frameHeader(r.between(100, 4 * 1024 * 1024)), Buffer.from(r.bytes(50))]));
  s.end(0);
};

const oversize: Behaviour = (s, r, names, _ledger, light) => {
  const bytes = light ? 64 * 1024 : 4 * 1024 * 1024 + 10; // light: large, not over the limit (and not a config)
  const resources = [{ type_url: RLC_TYPE, value: new Uint8Array(bytes) }];
  s.send({ version_info: names.version(r), resources, type_url: RLC_TYPE, nonce: names.nonce() }, light ? 'either' : 'none');
};

/** A valid response, a few bytes every 20 ms. */
const trickle: Behaviour = (s, r, names, ledger) => {
  const response = { version_info: names.version(r), resources: validResources(r, 1), type_url: RLC_TYPE, nonce: names.nonce() };
  ledger.sent(s.record, response.nonce, response.version_info, 'ack');
  const body = encodeResponse(response);
  const bytes = Buffer.concat([frameHeader(body.length), body]);
  let at = 0;
  const step = (): void => {
    if (at >= bytes.length || !s.open) return;
    s.write(bytes.subarray(at, at + 7));
    at += 7;
    later(20, step);
  };
  step();
};

const reset: Behaviour = (s, r) => later(r.int(500), () => s.open && s.h2.close(r.pick([0, 1, 2, 7, 8, 11, 0x1234])));

const goaway: Behaviour = (s, r) =>
  later(r.int(500), () => {
    s.h2.session?.goaway(r.pick([0, 1, 2, 11]), 0, Buffer.from(r.bytes(r.int(64))));
    later(50, () => s.h2.session?.destroy());
  });

/** A status of any code with a message of any length, printable or not. */
const status: Behaviour = (s, r) => {
  const text = String.fromCharCode(...Array.from({ length: r.pick([0, 10, 2000, 60_000]) }, () => r.pick([0x41, 0x7, 0x1b, 0x202e, 0xe9, 0x0a])));
  later(r.int(300), () => s.end(r.between(1, 16), text));
};

const badHeaders: Behaviour = (s, r) => {
  s.head(
    r.pick<Record<string, string>>([
      { ':status': '500' },
      { ':status': '200', 'content-type': 'text/html' },
      { ':status': '404', 'content-type': 'application/grpc' },
    ]),
  );
  s.end(0);
};

const silent: Behaviour = () => undefined;

export const BEHAVIOURS: Record<string, Behaviour> = {
  serve,
  flood,
  hugeStrings,
  otherType,
  garbageMessage,
  lyingLength,
  oversize,
  trickle,
  reset,
  goaway,
  status,
  badHeaders,
  silent,
};

function tryDecode(body: Buffer): DiscoveryResponse | undefined {
  try {
    return decodeResponse(body);
  } catch {
    return undefined;
  }
}
