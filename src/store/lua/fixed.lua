--[[
  Part of check-and-incr.lua, included where it says --#include fixed.lua: fixed windows (src/limits/kinds/
  fixed-window.ts), and the writing every window shares (sliding.lua too). A window's counter is
  <base>:<index>, a plain count. Uses the script's locals: call, now, cur, values, count.
]]

-- A fixed window's count: its value, no previous window, and what a decision weighs (the count).
local function fixed_read(j, w)
  local c = count(cur[j])
  return c, 0, c
end

-- Adds d to a window's count (a charge's, settlement's or refund's may be negative: the count stays at 0 or
-- more), and keeps what it wrote for the batch's later requests. Its expiry is set when the add created the
-- counter, or `always` (a charge writes whether or not the counter existed): a second after the last window
-- that can still read it (w.keep: a sliding window's is read through the next window).
local function window_add(j, w, _, d, always)
  local n = cur[j]
  local after = call('INCRBY', n, d)
  if after < 0 then after = call('INCRBY', n, -after) end
  values[n] = after
  if always or after == d then call('PEXPIRE', n, w.ends + w.keep - now + 1000) end
end
