--[[
  check-and-incr: decides a batch of requests, one after another; each request's windows are checked, and
  counted only if that request is admitted. Requests in a batch are independent: one's rejection never
  affects another's, except that a later request sees what an earlier one counted (as if sent one by one).
  Atomic, so replicas sharing this Redis can never admit more than a limit together.
  Run by src/store/redis-store.ts with EVALSHA (EVAL when Redis has not cached it yet).

  KEYS     the counters of every window of every request, in order (a key may appear more than once): each a
           hash with fields
             w  start of the window it counts (ms since the epoch, aligned to the epoch)
             c  count in window w
             p  count in the window before w (sliding windows only)
  ARGV[1]  now in ms, or "0" to use Redis's clock (TIME), which every replica then shares
  ARGV[2]  s, the number of window shapes; then s shapes of five values each (a batch's windows mostly share
           a few, so each is sent once):
                  window_ms, limit, hits (0 = check only), sliding (0|1), shadow (0|1)
  then, per request:
           mode   "count", or "peek" to decide without writing anything (the first phase of a request whose
                  counters live in several Redis Cluster slots)
           n      number of windows of this request (its keys are the next n of KEYS)
           then per window, two values: its shape (1-based), and its group (descriptor index)

  Returns  { now_ms, then per request: admitted (0|1), curr_1, prev_1, over_1, ..., curr_n, prev_n, over_n }
           curr/prev are the counts before this request; over_i is 1 when window i has no room.

  Rules (the same as src/store/store.ts settle() and src/counters/window.ts):
    used  = c                                  fixed window
    used  = p * (window - elapsed) / window + c  sliding window
    over  = used + max(hits, 1) > limit
    a group (descriptor) is over if any of its windows is; the request is admitted if no non-shadow group is
    over; then every window of every group that is not over is counted.
  Each hash expires one second after the last window that can still read it.
]]

local now = tonumber(ARGV[1])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local out = { now }

-- The shapes, as numbers once.
local shapes = {}
local s = tonumber(ARGV[2])
for i = 1, s do
  local a = 2 + (i - 1) * 5
  shapes[i] = {
    window = tonumber(ARGV[a + 1]),
    limit = tonumber(ARGV[a + 2]),
    hits = tonumber(ARGV[a + 3]),
    sliding = ARGV[a + 4] == '1',
    shadow = ARGV[a + 5] == '1',
  }
end

-- Decides one request whose windows are KEYS[k0 + 1 .. k0 + n], described by ARGV[a0 + 1 .. a0 + 2n].
local function decide(count, n, k0, a0)
  local starts, curr, prev, over = {}, {}, {}, {}
  local group_over = {}
  local admitted = 1
  for i = 1, n do
    local w = shapes[tonumber(ARGV[a0 + (i - 1) * 2 + 1])]
    local group = ARGV[a0 + (i - 1) * 2 + 2]
    local start = now - (now % w.window)
    starts[i] = start

    local f = redis.call('HMGET', KEYS[k0 + i], 'w', 'c', 'p')
    local fw = tonumber(f[1])
    local c, p = 0, 0
    if fw == start then
      c = tonumber(f[2]) or 0
      p = tonumber(f[3]) or 0
    elseif fw == start - w.window then
      p = tonumber(f[2]) or 0
    end
    if not w.sliding then p = 0 end
    curr[i], prev[i] = c, p

    local used = c
    if w.sliding then used = (p * (w.window - (now % w.window))) / w.window + c end
    if used + math.max(w.hits, 1) > w.limit then
      over[i] = 1
      group_over[group] = true
      if not w.shadow then admitted = 0 end
    else
      over[i] = 0
    end
  end

  if admitted == 1 and count then
    for i = 1, n do
      local w = shapes[tonumber(ARGV[a0 + (i - 1) * 2 + 1])]
      if w.hits > 0 and not group_over[ARGV[a0 + (i - 1) * 2 + 2]] then
        local lives = w.window
        if w.sliding then lives = 2 * w.window end
        redis.call('HSET', KEYS[k0 + i], 'w', starts[i], 'c', curr[i] + w.hits, 'p', prev[i])
        redis.call('PEXPIRE', KEYS[k0 + i], starts[i] + lives - now + 1000)
      end
    end
  end

  out[#out + 1] = admitted
  for i = 1, n do
    out[#out + 1] = curr[i]
    out[#out + 1] = prev[i]
    out[#out + 1] = over[i]
  end
end

-- The requests, one after another.
local k, a = 0, 3 + s * 5
while a <= #ARGV do
  local count = ARGV[a] == 'count'
  local n = tonumber(ARGV[a + 1])
  decide(count, n, k, a + 1)
  k = k + n
  a = a + 2 + n * 2
end
return out
