import { CliError } from '../errors.js';
import type { Explanation } from '../limiter/explain.js';
import type { DecisionInput } from '../limiter/plan.js';

/** `tollgate explain --url`: the running service's POST /explain, for configs the CLI cannot read itself (from
 * an xDS server, as under Envoy Gateway): the rule the service's own config matches, its live counters. */

/** An explanation is a few KiB; a larger answer is not one. */
const MAX_ANSWER_BYTES = 4 * 1024 * 1024;
const TIMEOUT_MS = 10_000;

/** The request as protobuf JSON, the form /explain (and /json) reads. */
function requestJson(r: DecisionInput): Record<string, unknown> {
  return {
    domain: r.domain,
    hitsAddend: r.hits,
    descriptors: r.descriptors.map((d) => ({
      entries: d.entries,
      ...(d.override && { limit: { requestsPerUnit: d.override.requestsPerUnit, unit: d.override.unit.toUpperCase() } }),
      ...(d.hits !== undefined && { hitsAddend: d.hits }),
      ...(d.refund && { isNegativeHits: true }),
    })),
  };
}

export async function explainViaService(url: string, request: DecisionInput): Promise<Explanation> {
  let base: URL;
  try {
    base = new URL(url);
  } catch {
    throw new CliError(`--url must be the service's HTTP address, such as http://127.0.0.1:8080 (got "${url.slice(0, 80)}")`, 2);
  }
  if (base.protocol !== 'http:' && base.protocol !== 'https:') throw new CliError('--url must be an http:// or https:// address', 2);
  const at = new URL('explain', base.href.endsWith('/') ? base.href : `${base.href}/`);
  let res: Response;
  try {
    res = await fetch(at, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(requestJson(request)),
      signal: AbortSignal.timeout(TIMEOUT_MS),
    });
  } catch (err) {
    const cause = (err as { cause?: { code?: string } }).cause?.code ?? (err as Error).name;
    throw new CliError(`cannot reach the service at ${at.origin}: ${cause}`);
  }
  const text = await bounded(res, at.origin);
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    throw new CliError(`${at.origin} answered ${res.status} with something other than JSON: is it Tollgate's HTTP port?`);
  }
  if (res.status !== 200) {
    const error = typeof (body as { error?: unknown }).error === 'string' ? (body as { error: string }).error.slice(0, 300) : `HTTP ${res.status}`;
    throw new CliError(`${at.origin} could not explain it: ${error}`);
  }
  return body as Explanation;
}

async function bounded(res: Response, origin: string): Promise<string> {
  const chunks: Uint8Array[] = [];
  let size = 0;
  const reader = res.body?.getReader();
  for (let r = await reader?.read(); r && !r.done; r = await reader!.read()) {
    size += r.value.byteLength;
    if (size > MAX_ANSWER_BYTES) {
      await reader!.cancel();
      throw new CliError(`${origin} answered more than ${MAX_ANSWER_BYTES} bytes: not an explanation`);
    }
    chunks.push(r.value);
  }
  return Buffer.concat(chunks).toString('utf8');
}

/** Under CONFIG_TYPE=GRPC_XDS_SOTW the config is in the service, not in a directory: one line saying how to ask it. */
export function xdsHint(env: NodeJS.ProcessEnv): string | undefined {
  if (!/^grpc_xds_sotw$/i.test(env.CONFIG_TYPE ?? '')) return undefined;
  const port = env.PORT || '8080';
  return (
    `the config comes from the xDS server here (CONFIG_TYPE=GRPC_XDS_SOTW), not a directory: ask the running service, ` +
    `tollgate explain --url http://127.0.0.1:${port} DOMAIN key=value … (from outside its pod: kubectl port-forward to its port ${port} first)`
  );
}
