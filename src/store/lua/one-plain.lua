--[[
  one-plain (layout v2): the lean script for a batch of one plain request, the quiet sidecar's usual call
  (src/store/redis-store.ts sends it when a script call would carry that request alone). It decides as
  check-and-incr.lua decides a plain request (plain.lua's decide_counting), with none of that script's fixed
  part: no shapes, no passes, no functions made. Run with EVALSHA (EVAL when Redis has not cached it yet), on one
  Redis (never a Cluster master's batch: those carry keys of several slots).

  KEYS     per window, its base (counters/keys.ts); its counter is <base>:<i>, i = floor(now / window_ms)
  ARGV[1]  now in ms, or "0" to use Redis's clock (TIME)
  then per window three values: window_ms, limit, hits (at least 1: a window only checked goes to the full
           script, which reads it)
  Every window is epoch-aligned, fixed, neither shadow, quota nor charge.

  Each window is one INCRBY, whose reply is its count, and a PEXPIRE when it created the counter (a second past
  the window's end). If any window has no room, every increment is taken back (a DECRBY, or a DEL of a counter it
  created), so a refused request leaves its counters as they were. A window named twice counts twice, each
  checked against the count before the request, as check-and-incr.lua counts it.

  Returns  { now_ms, admitted (0|1), then per window its count before the request, written -(count + 1) when it
           has no room } (check-and-incr.lua's reply for one plain request), or { now_ms, "FULL" } when an INCRBY
           was refused (a key of another type, a value that is not a count, out of memory): nothing is left
           changed, and the caller sends the request through check-and-incr.lua, which answers those.
]]

local call, tonumber = redis.call, tonumber
local now = tonumber(ARGV[1])
if now == 0 then
  local t = call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local n = #KEYS
local out, names, hits, afters = { now, 1 }, {}, {}, {}
local done = n
for i = 1, n do
  local a = 1 + (i - 1) * 3
  local window, limit, h = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
  local index = math.floor(now / window)
  -- Lua writes a whole number below 10^14 exactly (check-and-incr.lua's %.0f names it the same).
  local name = KEYS[i] .. ':' .. index
  names[i], hits[i] = name, h
  local after = redis.pcall('INCRBY', name, h)
  if type(after) == 'table' then
    out[2], done = 'FULL', i - 1
    break
  end
  afters[i] = after
  if after == h then call('PEXPIRE', name, (index + 1) * window - now + 1000) end
  local c = after - h
  for x = 1, i - 1 do
    if names[x] == name then c = c - hits[x] end
  end
  if c + h > limit then
    out[2 + i] = -c - 1
    out[2] = 0
  else
    out[2 + i] = c
  end
end
-- Refused, or not decided here: every increment taken back, the last first (a counter named twice is deleted
-- last, by the increment that created it).
if out[2] ~= 1 then
  for i = done, 1, -1 do
    if afters[i] == hits[i] then
      call('DEL', names[i])
    else
      call('DECRBY', names[i], hits[i])
    end
  end
end
if out[2] == 'FULL' then return { now, 'FULL' } end
return out
