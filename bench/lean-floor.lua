--[[
  The lean floor of a two-window check-and-count (bench/redis-cost.mjs), not used by Tollgate: what an atomic
  batch must do at least. Per request: one MGET of both windows' counters, INCRBY each when admitted, PEXPIRE
  only when a counter is new. No shapes, groups, shadow or quota: the limits are ARGV[2..3] for every request.
  KEYS: per request, two counter bases (second, hour); the window's start index is appended here.
  ARGV[1] unused (0), ARGV[2] per-second limit, ARGV[3] per-hour limit.
  Returns per request 1 (admitted) or 0.
]]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local limits = { tonumber(ARGV[2]), tonumber(ARGV[3]) }
local windows = { 1000, 3600000 }
local out = {}
for r = 1, #KEYS, 2 do
  local k = {}
  for j = 1, 2 do k[j] = KEYS[r + j - 1] .. ':' .. math.floor(now / windows[j]) end
  local v = redis.call('MGET', k[1], k[2])
  local ok = 1
  for j = 1, 2 do
    if (tonumber(v[j]) or 0) + 1 > limits[j] then ok = 0 end
  end
  if ok == 1 then
    for j = 1, 2 do
      if redis.call('INCRBY', k[j], 1) == 1 then
        redis.call('PEXPIRE', k[j], windows[j] - (now % windows[j]) + 1000)
      end
    end
  end
  out[#out + 1] = ok
end
return out
