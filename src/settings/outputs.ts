import type { ResponseSettings } from '../response/header-policy.js';
import { parseBool, SettingsError } from './compat.js';
import type { OptionName, Setting } from './table.js';

/** What clients and scrapers are given: the headers answers carry (envoyproxy/ratelimit's
 * LIMIT_RESPONSE_HEADERS_ENABLED and its header names beside Tollgate's RESPONSE_HEADERS), and the metrics
 * listener envoyproxy/ratelimit opens with USE_PROMETHEUS, which Envoy Gateway scrapes. */

type Reader = (name: OptionName) => Setting;

/** An HTTP header name (RFC 9110's token). */
const HEADER_NAME = /^[A-Za-z0-9!#$%&'*+.^_`|~-]+$/;

/** What answers carry and the metrics listener, as Settings holds them. */
export function outputSettings(
  setting: Reader,
  source: ResponseSettings['source'],
): { responses: ResponseSettings; prometheus: PrometheusListener | undefined } {
  const use = setting('prometheus');
  return { responses: responseSettings(setting, source), prometheus: parseBool(use.value, use.from) ? prometheusListener(setting) : undefined };
}

export function responseSettings(setting: Reader, source: ResponseSettings['source']): ResponseSettings {
  const own = setting('response-headers');
  const tollgate = own.value.trim().toLowerCase();
  if (tollgate !== 'auto' && tollgate !== 'on' && tollgate !== 'off') throw new SettingsError(`${own.from} must be auto, on or off (got "${own.value}")`);
  const enabled = setting('limit-response-headers');
  const limitHeaders = enabled.value === '' ? undefined : parseBool(enabled.value, enabled.from);
  if (tollgate === 'on' && limitHeaders)
    throw new SettingsError(`${own.from}=on and ${enabled.from}=true would both add rate-limit headers to every answer: choose one`);
  const name = (n: OptionName): string => {
    const s = setting(n);
    if (!HEADER_NAME.test(s.value)) throw new SettingsError(`${s.from} must be an HTTP header name (got "${s.value.slice(0, 60)}")`);
    return s.value;
  };
  const upstream = setting('limit-request-headers');
  const requestHeaders = parseBool(upstream.value, upstream.from)
    ? { limit: name('limit-request-limit-header'), remaining: name('limit-request-remaining-header'), reset: name('limit-request-reset-header') }
    : undefined;
  return {
    tollgate,
    limitHeaders,
    names: { limit: name('limit-limit-header'), remaining: name('limit-remaining-header'), reset: name('limit-reset-header') },
    source,
    ...(requestHeaders && { requestHeaders }),
  };
}

/** USE_PROMETHEUS's listener: PROMETHEUS_ADDR as Go's net.Listen reads it (":19001" is every address) and
 * PROMETHEUS_PATH. It serves the metrics and nothing else. */
export interface PrometheusListener {
  host: string;
  port: number;
  path: string;
  /** The flags and variables that set it, for a ListenError. */
  setBy: string;
}

export function prometheusListener(setting: Reader): PrometheusListener {
  const addr = setting('prometheus-addr');
  const m = /^(?:\[([0-9a-fA-F:.]+)\]|([^:[\]]*)):(\d{1,5})$/.exec(addr.value.trim());
  const port = m ? Number(m[3]) : Number.NaN;
  if (!m || port > 65535) throw new SettingsError(`${addr.from} must be [host]:port, such as :19001 or 127.0.0.1:9090 (got "${addr.value}")`);
  const path = setting('prometheus-path');
  if (!/^\/[\x21-\x7e]*$/.test(path.value)) throw new SettingsError(`${path.from} must be a path starting with / (got "${path.value.slice(0, 60)}")`);
  return { host: m[1] ?? (m[2] || '0.0.0.0'), port, path: path.value, setBy: '--prometheus-addr or PROMETHEUS_ADDR' };
}
