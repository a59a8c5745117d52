--[[
  check-and-incr: checks every window of one request, and counts them only if the request is admitted.
  One call per decision; atomic, so replicas sharing this Redis can never admit more than a limit together.
  Registered by src/store/redis-store.ts once per key count, as tollgateCheck<N> (keys first, so ioredis can
  route and auto-pipeline it by key in Redis Cluster).

  KEYS[i]  the counter of window i: a hash with fields
             w  start of the window it counts (ms since the epoch, aligned to the epoch)
             c  count in window w
             p  count in the window before w (sliding windows only)
  ARGV[1]  "count", or "peek" to decide without writing anything (the first phase of a request whose
           counters live in several Redis Cluster slots)
  ARGV[2]  now in ms, or "0" to use Redis's clock (TIME), which every replica then shares
  ARGV[3 + (i-1)*6 ...] for window i, six values:
             window_ms, limit, hits (0 = check only), sliding (0|1), group (descriptor index), shadow (0|1)

  Returns  { now_ms, admitted (0|1), curr_1, prev_1, over_1, ..., curr_n, prev_n, over_n }
           curr/prev are the counts before this request; over_i is 1 when window i has no room.

  Rules (the same as src/store/store.ts settle() and src/limiter/window.ts):
    used  = c                                  fixed window
    used  = p * (window - elapsed) / window + c  sliding window
    over  = used + max(hits, 1) > limit
    a group (descriptor) is over if any of its windows is; the request is admitted if no non-shadow group is
    over; then every window of every group that is not over is counted.
  Each hash expires one second after the last window that can still read it.
]]

local count = ARGV[1] == 'count'
local now = tonumber(ARGV[2])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local n = #KEYS
local starts, curr, prev, over = {}, {}, {}, {}
local group_over = {}
local admitted = 1

for i = 1, n do
  local a = 2 + (i - 1) * 6
  local window = tonumber(ARGV[a + 1])
  local limit = tonumber(ARGV[a + 2])
  local hits = tonumber(ARGV[a + 3])
  local sliding = ARGV[a + 4] == '1'
  local start = now - (now % window)
  starts[i] = start

  local f = redis.call('HMGET', KEYS[i], 'w', 'c', 'p')
  local w = tonumber(f[1])
  local c, p = 0, 0
  if w == start then
    c = tonumber(f[2]) or 0
    p = tonumber(f[3]) or 0
  elseif w == start - window then
    p = tonumber(f[2]) or 0
  end
  if not sliding then p = 0 end
  curr[i], prev[i] = c, p

  local used = c
  if sliding then used = (p * (window - (now % window))) / window + c end
  if used + math.max(hits, 1) > limit then
    over[i] = 1
    group_over[ARGV[a + 5]] = true
    if ARGV[a + 6] ~= '1' then admitted = 0 end
  else
    over[i] = 0
  end
end

if admitted == 1 and count then
  for i = 1, n do
    local a = 2 + (i - 1) * 6
    local hits = tonumber(ARGV[a + 3])
    if hits > 0 and not group_over[ARGV[a + 5]] then
      local window = tonumber(ARGV[a + 1])
      local sliding = ARGV[a + 4] == '1'
      local lives = window
      if sliding then lives = 2 * window end
      redis.call('HSET', KEYS[i], 'w', starts[i], 'c', curr[i] + hits, 'p', prev[i])
      redis.call('PEXPIRE', KEYS[i], starts[i] + lives - now + 1000)
    end
  end
end

local out = { now, admitted }
for i = 1, n do
  out[#out + 1] = curr[i]
  out[#out + 1] = prev[i]
  out[#out + 1] = over[i]
end
return out
