import type { EntryLike } from '../config/match.js';
import { UserError } from '../errors.js';

/** What Tollgate needs to know of an Envoy v3 bootstrap: the HTTP rate-limit filter's settings, the RLS
 * cluster, the connection manager's settings that decide which path a route sees and whether a request is
 * internal, and the routes with the descriptors they produce. Used to cross-check envoy.yaml against the
 * descriptor config, to replay traffic as Envoy would see it, and to prove that no spelling of a request
 * escapes its limit. Only the features the sidecar uses are understood (path, prefix, path_separated_prefix,
 * safe_regex, case_sensitive; header exact, prefix, safe_regex, present; generic_key and request_headers
 * actions); anything else is an error, not a silent guess.
 *
 * Envoy's behaviour is followed as documented and as its source does it (references in docs/security.md, "Security
 * choices"): path normalisation is the Chromium URL path canonicaliser Envoy uses (RFC 3986 dot segments,
 * percent-escapes of unreserved characters decoded, backslash as slash), then merge_slashes; escaped
 * slashes are handled before both; a request is internal only as ConnectionManagerUtility decides it. */

export type Action =
  | { kind: 'generic_key'; key: string; value: string }
  | { kind: 'request_headers'; header: string; key: string; skipIfAbsent: boolean }
  /** Envoy's remote_address action: ("remote_address", the trusted client address), and no descriptor at
   * all when there is none (Envoy's RemoteAddressAction; docs: "trusted address from x-forwarded-for"). */
  | { kind: 'remote_address'; key: 'remote_address' };

export interface HeaderMatch {
  name: string;
  test: (value: string | undefined) => boolean;
}

export interface RouteSpec {
  index: number;
  /** Called with the path as Envoy has normalised it (query included). */
  matchPath: (path: string) => boolean;
  headers: HeaderMatch[];
  /** One descriptor per rate_limits entry (of the filter's stage), each a list of actions. */
  rateLimits: Action[][];
}

export type EscapedSlashesAction = 'KEEP_UNCHANGED' | 'REJECT_REQUEST' | 'UNESCAPE_AND_REDIRECT' | 'UNESCAPE_AND_FORWARD';

export interface ConnectionManagerSpec {
  useRemoteAddress: boolean;
  xffNumTrustedHops: number;
  /** internal_address_config: its CIDRs; 'rfc1918' when present without CIDRs (the documented fallback);
   * 'envoy-default' when absent (RFC 1918 before Envoy 1.33, nothing from 1.33 on). */
  internalAddresses: string[] | 'rfc1918' | 'envoy-default';
  normalizePath: boolean;
  mergeSlashes: boolean;
  escapedSlashes: EscapedSlashesAction;
}

export type RequestType = 'internal' | 'external' | 'both';

export interface EnvoyRateLimitSetup {
  file: string;
  domain: string;
  timeoutMs: number;
  failureModeDeny: boolean;
  xRateLimitHeaders: string;
  transportApiVersion: string;
  requestType: RequestType;
  rls: { cluster: string; address: string; port: number; http2: boolean };
  connectionManager: ConnectionManagerSpec;
  routes: RouteSpec[];
}

export interface HttpRequestLike {
  method: string;
  path: string;
  /** Lower-case header names. */
  headers: Record<string, string | undefined>;
  /** The TCP peer Envoy sees (default: a pod-network address, as behind kube-proxy or a load balancer). */
  remoteAddress?: string;
}

/** What Envoy does with a request: answers it itself (400, redirect, 404 for no route) or routes it, calling
 * the rate-limit service first when `descriptors` is not empty. */
export type EnvoyOutcome =
  | { kind: 'rejected'; status: 400; reason: string }
  | { kind: 'redirect'; location: string }
  | { kind: 'no-route'; path: string }
  | { kind: 'routed'; path: string; route: RouteSpec; internal: boolean; filterApplies: boolean; descriptors: EntryLike[][] };

export interface ModelOptions {
  /** The Envoy release the file runs on; it decides the default of internal_address_config. */
  envoyVersion?: string;
}

/** The Envoy release the shipped manifests pin (deploy/kubernetes, docker-compose.yml; a test keeps them equal). */
export const PINNED_ENVOY_VERSION = '1.37.10';
/** A peer on the pod network: what Envoy sees when a request comes through kube-proxy or a load balancer. */
export const DEFAULT_PEER = '10.244.0.1';

/** A bootstrap Tollgate cannot read, or reads a feature of that it does not model: the message names the file
 * and what is wrong. */
export class EnvoyConfigError extends UserError {
  override readonly name = 'EnvoyConfigError';
}
