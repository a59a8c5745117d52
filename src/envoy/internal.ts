import { BlockList, isIP } from 'node:net';
import { type ConnectionManagerSpec, DEFAULT_PEER, type HttpRequestLike, PINNED_ENVOY_VERSION } from './spec.js';

/** Internal or external, as ConnectionManagerUtility::mutateRequestHeaders decides. */

/** Envoy's Network::Utility::isInternalAddress: RFC 1918, IPv4 loopback, fd00::/8, ::1. */
const RFC1918 = cidrList(['10.0.0.0/8', '172.16.0.0/12', '192.168.0.0/16', '127.0.0.1/32', 'fd00::/8', '::1/128']);

function cidrList(cidrs: string[]): BlockList {
  const list = new BlockList();
  for (const c of cidrs) {
    const [address, len] = c.split('/') as [string, string];
    list.addSubnet(address, Number(len), isIP(address) === 6 ? 'ipv6' : 'ipv4');
  }
  return list;
}

function versionAtLeast(version: string, major: number, minor: number): boolean {
  const [ma = 0, mi = 0] = version.replace(/^v/, '').split('.').map(Number);
  return ma > major || (ma === major && mi >= minor);
}

function isInternalAddress(address: string, cm: ConnectionManagerSpec, version: string): boolean {
  const type = isIP(address) === 6 ? 'ipv6' : 'ipv4';
  if (isIP(address) === 0) return false;
  if (Array.isArray(cm.internalAddresses)) return cidrList(cm.internalAddresses).check(address, type);
  // From 1.33 an absent internal_address_config trusts no address (changelog 1.33.0, "http").
  if (cm.internalAddresses === 'envoy-default' && versionAtLeast(version, 1, 33)) return false;
  return RFC1918.check(address, type);
}

/** The address the XFF header names `skip` hops from its right end, and whether it holds a single address
 * (Utility::getLastAddressFromXFF): only then may it make the request internal. */
function addressFromXff(xff: string, skip: number): { address?: string; single: boolean } {
  const parts = xff.split(',');
  const address = parts[parts.length - 1 - skip]?.trim();
  return { address: address && isIP(address) ? address : undefined, single: parts.length === 1 && skip === 0 };
}

/** Whether Envoy marks the request internal (x-envoy-internal: true). With use_remote_address the peer
 * decides, and only when the request carries no XFF; without it, a single-address XFF does. A client's own
 * x-envoy-internal header is always removed first, so it never counts. */
export function isInternalRequest(cm: ConnectionManagerSpec, req: HttpRequestLike, version = PINNED_ENVOY_VERSION): boolean {
  const xff = req.headers['x-forwarded-for'];
  const peer = req.remoteAddress ?? DEFAULT_PEER;
  if (cm.useRemoteAddress) return xff === undefined && isInternalAddress(peer, cm, version);
  if (xff === undefined) return false;
  const { address, single } = addressFromXff(xff, cm.xffNumTrustedHops);
  return single && address !== undefined && isInternalAddress(address, cm, version);
}

/** The client address Envoy trusts (the HCM's downstream remote address): with use_remote_address, the
 * peer when no XFF hop is trusted, else the address that many hops from the right of the client's XFF;
 * without it, the XFF address past the trusted hops. When XFF is missing, too short or not an address,
 * Envoy keeps the peer. */
export function trustedClientAddress(cm: ConnectionManagerSpec, req: HttpRequestLike): string {
  const peer = req.remoteAddress ?? DEFAULT_PEER;
  const xff = req.headers['x-forwarded-for'];
  if ((cm.useRemoteAddress && cm.xffNumTrustedHops === 0) || xff === undefined) return peer;
  return addressFromXff(xff, cm.useRemoteAddress ? cm.xffNumTrustedHops - 1 : cm.xffNumTrustedHops).address ?? peer;
}
