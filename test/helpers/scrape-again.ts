import { scrape } from './metrics.js';

/** /metrics' series, asked once more when the first request failed on its socket (undici's "fetch failed",
 * "other side closed"): a request sent on a kept-alive connection just as the service closed it idle, a race with
 * the server's keep-alive timeout that a busy machine widens (issue 59, a scrape after 5 s of attack setup). A
 * service that is down fails the second request too. */
export async function seriesOf(httpPort: number): Promise<Map<string, number>> {
  try {
    return (await scrape(httpPort)).series;
  } catch (err) {
    if (!(err instanceof TypeError) || err.message !== 'fetch failed') throw err;
    return (await scrape(httpPort)).series;
  }
}
