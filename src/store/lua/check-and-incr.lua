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
           or, for a token bucket (its own key, src/counters/keys.ts):
             w  when it was last written (ms)
             c  its debt then, in ticks of 1/limit ms (src/counters/bucket.ts)
  ARGV[1]  now in ms, or "0" to use Redis's clock (TIME), which every replica then shares
  ARGV[2]  s, the number of window shapes; then s shapes of seven values each (a batch's windows mostly
           share a few, so each is sent once):
                  window_ms, limit, hits (0 = check only), sliding (0|1), shadow (0|1), burst (0 = a window),
                  quota (0|1)
  then, per request:
           mode   "count", or "peek" to decide without writing anything (the first phase of a request whose
                  counters live in several Redis Cluster slots)
           n      number of windows of this request (its keys are the next n of KEYS)
           then per window, two values: its shape (1-based), and its group (descriptor index)

  Returns  { now_ms, then per request: admitted (0|1), curr_1, prev_1, over_1, ..., curr_n, prev_n, over_n }
           curr/prev are the counts before this request (a bucket: curr = its debt now, prev = 0); over_i is 1
           when window i has no room. A request whose keys Redis refused (a key of another type: WRONGTYPE;
           out of memory: OOM) has, in place of admitted, the error's first word as a string, and zeros for
           its windows: it fails alone, the others of the batch are decided as usual. Its reads come before
           any write, so a refused read leaves nothing written. A write refused after another write of the
           same request (Redis crossing maxmemory between the two) leaves the first: over maxmemory Redis
           refuses every write, so in practice it is the first write that fails.

  Rules (the same as src/store/store.ts settle() and src/counters/window.ts):
    used  = c                                  fixed window
    used  = p * (window - elapsed) / window + c  sliding window
    over  = used + max(hits, 1) > limit
    token bucket (GCRA), in ticks of 1/limit ms, where one request costs window ticks:
    debt  = max(0, c - (now - w) * limit)
    over  = debt + max(hits, 1) * window > burst * window
    counted: w = now, c = debt + hits * window, expiring when the debt is paid back, plus a second
    a group (descriptor) is over if any of its windows is; the request is admitted unless a group that is
    neither shadow nor quota is over, or the request has quota groups and all of them are over; then every
    window of every group that is not over is counted.
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
  local a = 2 + (i - 1) * 7
  shapes[i] = {
    window = tonumber(ARGV[a + 1]),
    limit = tonumber(ARGV[a + 2]),
    hits = tonumber(ARGV[a + 3]),
    sliding = ARGV[a + 4] == '1',
    shadow = ARGV[a + 5] == '1',
    burst = tonumber(ARGV[a + 6]),
    quota = ARGV[a + 7] == '1',
  }
end

-- A window's count, the previous window's (sliding only), and whether it has room (see the rules above).
local function counts(key, w, start)
  local f = redis.call('HMGET', key, 'w', 'c', 'p')
  local fw = tonumber(f[1])
  local c, p = 0, 0
  if fw == start then
    c = tonumber(f[2]) or 0
    p = tonumber(f[3]) or 0
  elseif fw == start - w.window then
    p = tonumber(f[2]) or 0
  end
  if not w.sliding then p = 0 end
  local used = c
  if w.sliding then used = (p * (w.window - (now % w.window))) / w.window + c end
  return c, p, used + math.max(w.hits, 1) > w.limit
end

-- A bucket's debt now and whether it has room (see the rules above).
local function bucket(key, w)
  local f = redis.call('HMGET', key, 'w', 'c')
  local at, debt = tonumber(f[1]), tonumber(f[2])
  local d = 0
  if at and debt then d = math.max(0, debt - (now - at) * w.limit) end
  return d, d + math.max(w.hits, 1) * w.window > w.burst * w.window
end

-- Writes a bucket that was admitted. Integers are written with %.0f: tostring keeps only 14 digits.
local function take(key, w, debt)
  local after = debt + w.hits * w.window
  local full = w.window
  if w.limit > 0 then full = math.ceil(after / w.limit) end
  redis.call('HSET', key, 'w', string.format('%.0f', now), 'c', string.format('%.0f', after))
  redis.call('PEXPIRE', key, full + 1000)
end

-- Decides one request whose windows are KEYS[k0 + 1 .. k0 + n], described by ARGV[a0 + 1 .. a0 + 2n].
local function decide(count, n, k0, a0)
  local starts, curr, prev, over = {}, {}, {}, {}
  local group_over = {}
  local quota_group = {}
  local quota_groups, quota_over = 0, 0
  local admitted = 1
  for i = 1, n do
    local w = shapes[tonumber(ARGV[a0 + (i - 1) * 2 + 1])]
    local group = ARGV[a0 + (i - 1) * 2 + 2]
    local start = now - (now % w.window)
    starts[i] = start
    local is_over
    if w.burst > 0 then
      curr[i], is_over = bucket(KEYS[k0 + i], w)
      prev[i] = 0
    else
      curr[i], prev[i], is_over = counts(KEYS[k0 + i], w, start)
    end
    if w.quota and not quota_group[group] then
      quota_group[group] = true
      quota_groups = quota_groups + 1
    end
    if is_over then
      over[i] = 1
      if w.quota and not w.shadow and not group_over[group] then quota_over = quota_over + 1 end
      group_over[group] = true
      if not w.shadow and not w.quota then admitted = 0 end
    else
      over[i] = 0
    end
  end
  if quota_groups > 0 and quota_over == quota_groups then admitted = 0 end

  if admitted == 1 and count then
    for i = 1, n do
      local w = shapes[tonumber(ARGV[a0 + (i - 1) * 2 + 1])]
      if w.hits > 0 and w.burst > 0 and not group_over[ARGV[a0 + (i - 1) * 2 + 2]] then
        take(KEYS[k0 + i], w, curr[i])
      elseif w.hits > 0 and not group_over[ARGV[a0 + (i - 1) * 2 + 2]] then
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
local k, a = 0, 3 + s * 7
-- The error's code word (WRONGTYPE, OOM, ERR), from what pcall caught: a table on Redis 7, a string such as
-- "@user_script:1: -OOM command not allowed ..." before it.
local function kind(err)
  local text = type(err) == 'table' and (err.err or '') or tostring(err)
  return string.match(text, '(%u%u+)') or 'ERR'
end

while a <= #ARGV do
  local count = ARGV[a] == 'count'
  local n = tonumber(ARGV[a + 1])
  local ok, err = pcall(decide, count, n, k, a + 1)
  if not ok then
    out[#out + 1] = kind(err)
    for _ = 1, n * 3 do out[#out + 1] = 0 end
  end
  k = k + n
  a = a + 2 + n * 2
end
return out
