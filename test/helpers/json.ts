/** A JSON answer's body for a test to assert on: without the DOM library (a server codebase), fetch's
 * `Response.json()` is typed `unknown`, and a test reads whichever fields it checks. */
// biome-ignore lint/suspicious/noExplicitAny: the fields asserted on are the test's own business
export type Json = any;

export const jsonOf = (r: Response): Promise<Json> => r.json() as Promise<Json>;
