import type { RlqsStreamError } from '../metrics/rlqs-metrics.js';
import { tooLong } from '../rls/request.js';
import { badInstanceName } from './identity.js';

/** Why a stream's first message cannot open it, as the reason counted and the status message sent (lengths,
 * never the text): no domain, one longer than `maxBytes`, or an instance header that is not a name. */
export function openingRefusal(domain: string, maxBytes: number, named: string | undefined): { reason: RlqsStreamError; details: string } | undefined {
  if (domain === '') return { reason: 'no_domain', details: 'the first report names no domain' };
  if (tooLong(domain, maxBytes)) return { reason: 'bad_domain', details: `the domain is longer than ${maxBytes} bytes` };
  const bad = named === undefined ? undefined : badInstanceName(named);
  return bad === undefined ? undefined : { reason: 'bad_instance', details: bad };
}
