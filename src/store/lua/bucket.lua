--[[
  Part of check-and-incr.lua, included where it says --#include bucket.lua: token buckets (GCRA,
  src/limits/kinds/token-bucket.ts and src/counters/bucket.ts). The counter is <base> itself, "<w> <c>":
  when it was last written (ms) and its debt then, in ticks of 1/limit ms; one request costs `window` ticks
  (w.step) and an empty bucket holds `burst` requests (w.cap = burst * window). Uses the script's locals:
  call, max, now, cur, values.
]]

-- The debt now: what was stored, paid back at `limit` ticks a ms since. Read twice (current and weighed).
local function bucket_read(j, w)
  local v = values[cur[j]]
  local d = 0
  if v then
    local at, debt = string.match(v, '^(%d+) (%d+)$')
    if not at then error({ err = 'WRONGTYPE bucket value is not one' }) end
    d = max(0, tonumber(debt) - (now - tonumber(at)) * w.limit)
  end
  return d, 0, d
end

-- Adds d requests (negative: given back; never fuller than empty debt) to the debt read as `curr`. Kept until
-- the bucket is full again, plus a second. Integers are written with %.0f: tostring keeps only 14 digits.
local function bucket_add(j, w, curr, d, _)
  local n = cur[j]
  local after = max(0, curr + d * w.window)
  local full = w.window
  if w.limit > 0 then full = math.ceil(after / w.limit) end
  local v = string.format('%.0f %.0f', now, after)
  call('SET', n, v, 'PX', full + 1000)
  values[n] = v
end
