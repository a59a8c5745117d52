// What both floors answer: OK with the three headers Tollgate sends on every response.
export const NOOP_RESPONSE = {
  overall_code: 1,
  statuses: [{ code: 1, limit_remaining: 0 }],
  response_headers_to_add: [
    { key: 'X-RateLimit-Limit', value: '1000' },
    { key: 'X-RateLimit-Remaining', value: '999' },
    { key: 'X-RateLimit-Reset', value: '1800000000' },
  ],
  request_headers_to_add: [],
};
