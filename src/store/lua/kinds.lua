--[[
  Part of check-and-incr.lua, included where it says --#include kinds.lua: the kinds of limit
  (src/limits/kinds/), each one's traits, and (set in check-and-incr.lua once the kinds' includes are read)
  its read and add.
]]

-- The kinds of limit, by code: a kind's code is its place in src/limits/kinds/index.ts, from 0, and each entry
-- here names the same kind (test/unit/kinds-docs.test.ts holds the two lists together). What the rest of the
-- script asks a shape's kind, instead of branching on its code:
--   prev     its reply holds the previous window's count too, kept at <base>:<index - 1> (sliding);
--   refills  it holds ticks, not requests: step = window, cap = burst * window (a bucket);
--   whole    its counter is the base key itself, not <base>:<index> (a bucket, slots);
--   slots    its holders are kept by slots.lua, read and written through charges.lua;
--   plain    a request of such windows alone, none shadow, quota or charge, may take plain.lua's path;
--   read, add  its include's read (count, previous, what a decision weighs) and add, set in
--            check-and-incr.lua once the kinds' includes are read.
-- A shape's step and cap say what it holds: used + n * step > cap is over; keep, how long past its window's
-- end a counter is still read.
local KINDS = {
  [0] = { name = 'fixed_window', plain = true },
  [1] = { name = 'sliding_window', prev = true },
  [2] = { name = 'token_bucket', refills = true, whole = true },
  [3] = { name = 'in_flight', whole = true, slots = true },
}
