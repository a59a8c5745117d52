import { describe, expect, it } from 'vitest';
import { InvalidRequestError } from '../../src/errors.js';
import { defaultBounds, type RequestBounds, toDecisionInput, type WireDescriptor, type WireRequest } from '../../src/rls/request.js';

// A marker in every place a client's text can be: no message may repeat it.
const MARK = 'Bearer MARKER-5ec2e7';
const SMALL: RequestBounds = { maxDescriptors: 3, maxEntries: 2, maxValueBytes: 32 };

const descriptor = (over: Partial<WireDescriptor> = {}): WireDescriptor => ({ entries: [{ key: 'token', value: MARK }], ...over });
const request = (over: Partial<WireRequest> = {}): WireRequest => ({ domain: 'property-api', descriptors: [descriptor()], hits_addend: 0, ...over });

/** The InvalidRequestError message toDecisionInput throws for `req`. */
function refusal(req: WireRequest, bounds = SMALL): string {
  try {
    toDecisionInput(req, bounds);
  } catch (err) {
    expect(err).toBeInstanceOf(InvalidRequestError);
    return (err as Error).message;
  }
  throw new Error('accepted');
}

describe('toDecisionInput: a valid request', () => {
  it('keeps the domain and entries; hits_addend 0 (unset) is 1, as Envoy means it', () => {
    const input = toDecisionInput(request(), SMALL);
    expect(input).toEqual({ domain: 'property-api', hits: 1, descriptors: [{ entries: [{ key: 'token', value: MARK }] }] });
    expect(toDecisionInput(request({ hits_addend: 7 }), SMALL).hits).toBe(7);
  });

  it('takes the per-descriptor limit override and hits_addend, 0 included (check only)', () => {
    const d = descriptor({ limit: { requests_per_unit: 5, unit: 2 }, hits_addend: { value: 0 } });
    expect(toDecisionInput(request({ descriptors: [d] }), SMALL).descriptors[0]).toEqual({
      entries: d.entries,
      override: { requestsPerUnit: 5, unit: 'minute' },
      hits: 0,
    });
    const every = [1, 2, 3, 4, 5, 6].map((unit) => toDecisionInput(request({ descriptors: [descriptor({ limit: { requests_per_unit: 1, unit } })] }), SMALL));
    expect(every.map((i) => i.descriptors[0]!.override!.unit)).toEqual(['second', 'minute', 'hour', 'day', 'month', 'year']);
  });

  it('a value that is not a string (absent in the message) is the empty value', () => {
    const d = { entries: [{ key: 'token', value: undefined as unknown as string }] };
    expect(toDecisionInput(request({ descriptors: [d] }), SMALL).descriptors[0]!.entries[0]).toEqual({ key: 'token', value: '' });
  });

  it('accepts exactly the bounds: descriptors, entries, and bytes (not characters) of keys and values', () => {
    const entries = [
      { key: 'k'.repeat(32), value: 'é'.repeat(16) },
      { key: 'b', value: 'v' },
    ];
    const at = request({ domain: 'd'.repeat(32), descriptors: [descriptor({ entries }), descriptor(), descriptor()] });
    expect(toDecisionInput(at, SMALL).descriptors).toHaveLength(3);
  });

  it('the default bounds let through the largest header value Envoy forwards (60 KiB)', () => {
    const big = request({ descriptors: [descriptor({ entries: [{ key: 'token', value: 'x'.repeat(60 * 1024) }] })] });
    expect(() => toDecisionInput(big, defaultBounds)).not.toThrow();
  });
});

describe('toDecisionInput: every refusal says what and where, and never repeats a value', () => {
  const tooMany = Array.from({ length: 4 }, () => descriptor());
  const twoByteValue = `${'é'.repeat(16)}x`; // 17 characters, 33 bytes
  const cases: [string, WireRequest, string][] = [
    ['empty domain', request({ domain: '' }), 'domain is empty'],
    ['domain over the byte bound', request({ domain: MARK.repeat(3) }), 'domain is longer than 32 bytes'],
    ['no descriptors', request({ descriptors: [] }), 'no descriptors: a request needs at least one'],
    ['descriptors absent', request({ descriptors: undefined as unknown as WireDescriptor[] }), 'no descriptors: a request needs at least one'],
    ['too many descriptors', request({ descriptors: tooMany }), '4 descriptors, more than the maximum of 3'],
    ['a descriptor without entries', request({ descriptors: [descriptor(), descriptor({ entries: [] })] }), 'descriptors[1] has no entries'],
    [
      'too many entries',
      request({
        descriptors: [
          descriptor({
            entries: [
              { key: 'a', value: MARK },
              { key: 'b', value: MARK },
              { key: 'c', value: MARK },
            ],
          }),
        ],
      }),
      'descriptors[0] has 3 entries, more than the maximum of 2',
    ],
    [
      'an empty key',
      request({
        descriptors: [
          descriptor({
            entries: [
              { key: 'a', value: MARK },
              { key: '', value: MARK },
            ],
          }),
        ],
      }),
      'descriptors[0].entries[1] has an empty key',
    ],
    [
      'a key over the bound',
      request({ descriptors: [descriptor({ entries: [{ key: MARK.repeat(2), value: 'v' }] })] }),
      'descriptors[0].entries[0]: key is longer than 32 bytes',
    ],
    [
      'a value over the bound',
      request({ descriptors: [descriptor({ entries: [{ key: 'token', value: MARK.repeat(2) }] })] }),
      'descriptors[0].entries[0]: value is 40 bytes, more than the maximum of 32',
    ],
    [
      'a value over the bound in bytes, not characters',
      request({ descriptors: [descriptor({ entries: [{ key: 'token', value: twoByteValue }] })] }),
      'descriptors[0].entries[0]: value is 33 bytes, more than the maximum of 32',
    ],
    [
      'an override unit of 0 (UNKNOWN)',
      request({ descriptors: [descriptor({ limit: { requests_per_unit: 1, unit: 0 } })] }),
      'descriptors[0].limit.unit must be SECOND, MINUTE, HOUR, DAY, MONTH or YEAR (got 0)',
    ],
    [
      'an override unit past YEAR',
      request({ descriptors: [descriptor({ limit: { requests_per_unit: 1, unit: 7 } })] }),
      'descriptors[0].limit.unit must be SECOND, MINUTE, HOUR, DAY, MONTH or YEAR (got 7)',
    ],
    [
      'a negative hits_addend',
      request({ descriptors: [descriptor({ hits_addend: { value: -1 } })] }),
      'descriptors[0].hits_addend must be a whole number from 0 to 4294967295',
    ],
    [
      'a fractional hits_addend',
      request({ descriptors: [descriptor({ hits_addend: { value: 1.5 } })] }),
      'descriptors[0].hits_addend must be a whole number from 0 to 4294967295',
    ],
    [
      'a hits_addend past uint32',
      request({ descriptors: [descriptor({ hits_addend: { value: 2 ** 32 } })] }),
      'descriptors[0].hits_addend must be a whole number from 0 to 4294967295',
    ],
  ];

  it.each(cases)('%s', (_name, req, message) => {
    const got = refusal(req);
    expect(got).toBe(message);
    expect(got).not.toContain('MARKER');
    expect(got).not.toContain('é');
  });
});
