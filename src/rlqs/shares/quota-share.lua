--[[
  quota-share: RLQS grants for a batch of buckets of one report, each bucket in one atomic step, so no two
  replicas can hand out the same room (src/counters/fair-share.ts reserve() is the same arithmetic, and the
  memory store's):
    fair   = the instance's max-min fair share of the capacity among every live entry (its demand first)
    grant  = max(0, min(fair, capacity - the sum of what the other live entries hold, limit))
             limit = what its Envoy runs now while the table is rebuilt (see below), else no limit
    held   = max(grant, what its Envoy runs now): what its entry holds, so a shrink frees room once it was sent
  Run by src/rlqs/shares/redis-share-store.ts with EVALSHA (EVAL when Redis has not cached it yet), for up to a few
  dozen buckets at a time (one Redis Cluster slot per call).

  KEYS[i]  bucket i's share hash (src/counters/keys.ts demandKey): field = an instance's fingerprint, value =
           "<demand> <held> <expires_ms>", demand in requests a second (-1: not known yet); and the field
           "~table" = "<born_us> <rebuilt_until_ms>": when the table was made (µs: a stamp no other table of this
           key has), and until when it is rebuilt
  ARGV[1]  most instances kept per bucket: past it, the entries nearest their end are dropped
  then per bucket, 8 values:
           the instance's fingerprint
           its planned demand (-1: not known yet)
           the capacity: what the fleet may admit, requests a second
           how long its entry lives without a newer report, in ms
           the rate its Envoy may be running now (what it was last sent)
           when the table the caller last saw was made (µs), or 0 if it knows none
           until when that table was to live (ms; 0 if none)
           how long a table found lost is rebuilt, in ms

  A lost table (Redis restarted without persistence, the hash evicted or deleted) forgot what the Envoys it
  served still run. It is known lost when it is missing, or younger than the one the caller saw, while that one
  should still live; or when the instance runs a grant but has no entry. It is then rebuilt for the given time
  (the assignments' TTL, after which no Envoy runs a grant it lost): no grant exceeds what its Envoy already
  runs, so the rates in force cannot sum past what they summed to before the loss, while each instance's next
  report records what it runs again.

  Expiry is read on Redis's clock (TIME), which every replica shares. The hash expires with its longest-lived
  entry, so a bucket nobody reports any more leaves nothing behind. An entry that cannot be read, or ends more
  than a week away (no report interval makes that; another writer did), is deleted, not used.

  Returns  per bucket 7 values: { grant, fair, what it held before or "-1" for a new entry, what it holds now,
           when the table was made, until when it lives, how many other live entries it holds } as strings (a
           Lua number returned to Redis would lose its fraction); for a bucket whose key Redis refused (a key of
           another type) the error's first word (WRONGTYPE) and six empty strings: that bucket fails alone.
]]

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local cap = tonumber(ARGV[1])
local TABLE = '~table'
local fmt = function(x) return string.format('%.17g', x) end
local whole = function(x) return string.format('%.0f', x) end

-- The water level (counters/fair-share.ts waterLevel): demands sorted as numbers; in order, while a demand is
-- under an equal split of what is left it takes itself, else every demand from there on gets that split; if all
-- fit, what is left is split among all. Returns the instance's fair share.
local function fair_share(capacity, demand, demands, n)
  if capacity <= 0 then return 0 end
  local sorted = { demand }
  for i = 1, n do sorted[i + 1] = demands[i] end
  table.sort(sorted)
  local total = n + 1
  local left, level, spare = capacity, math.huge, 0
  for k = 1, total do
    local equal = left / (total - k + 1)
    if sorted[k] >= equal then
      level = equal
      break
    end
    left = left - sorted[k]
  end
  if level == math.huge then spare = left / total end
  return math.min(demand, level) + spare
end

-- Past the bound, the entries nearest their end go (a rare path: a closure sort is fine here).
local function drop_nearest_end(key, ids, demands, granted, ends, n)
  local order = {}
  for i = 1, n do order[i] = i end
  table.sort(order, function(a, b) return ends[a] < ends[b] end)
  local drop = {}
  for i = 1, n - cap + 1 do
    drop[order[i]] = true
    redis.call('HDEL', key, ids[order[i]])
  end
  local keep = 0
  for i = 1, n do
    if not drop[i] then
      keep = keep + 1
      ids[keep], demands[keep], granted[keep], ends[keep] = ids[i], demands[i], granted[i], ends[i]
    end
  end
  for i = keep + 1, n do ids[i], demands[i], granted[i], ends[i] = nil, nil, nil, nil end
  return keep
end

-- One bucket: its arguments start at ARGV[a].
local function share(key, a)
  local me, demand, capacity = ARGV[a], tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  local ttl, running = tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
  local seen_born, seen_end, rebuild = tonumber(ARGV[a + 5]), tonumber(ARGV[a + 6]), tonumber(ARGV[a + 7])
  if demand < 0 then demand = math.huge end

  -- The live entries but this instance's, in parallel arrays (no table per entry); expired and unreadable ones
  -- are deleted.
  local all = redis.call('HGETALL', key)
  local ids, demands, granted, ends = {}, {}, {}, {}
  local previous, mine = '-1', false
  local born, rebuilt_until = nil, 0
  local n = 0
  for i = 1, #all, 2 do
    if all[i] == TABLE then
      local b, r = string.match(all[i + 1], '^(%d+) (%d+)$')
      born, rebuilt_until = tonumber(b), tonumber(r) or 0
    else
      local d, g, e = string.match(all[i + 1], '^(%S+) (%S+) (%d+)$')
      local at, dd, gg = tonumber(e), tonumber(d), tonumber(g)
      if all[i] == me then
        if gg then previous, mine = g, true end
      elseif at == nil or dd == nil or gg == nil or at <= now or at > now + 604800000 then
        redis.call('HDEL', key, all[i])
      else
        n = n + 1
        ids[n], granted[n], ends[n] = all[i], gg, at
        if dd < 0 then demands[n] = math.huge else demands[n] = dd end
      end
    end
  end
  if born == nil then born = now_us end

  -- Lost: younger than the table the caller saw while that one should still live, or this instance runs a
  -- grant its table no longer holds.
  if (seen_born > 0 and now < seen_end and born ~= seen_born) or (running > 0 and not mine) then
    if now + rebuild > rebuilt_until then rebuilt_until = now + rebuild end
  end
  if n >= cap then n = drop_nearest_end(key, ids, demands, granted, ends, n) end

  local held = 0
  for i = 1, n do held = held + granted[i] end
  local fair = fair_share(capacity, demand, demands, n)
  local grant = math.max(0, math.min(fair, capacity - held))
  if now < rebuilt_until then grant = math.min(grant, running) end
  local mine_now = math.max(grant, running)
  local entry = (demand == math.huge and '-1' or fmt(demand)) .. ' ' .. fmt(mine_now) .. ' ' .. whole(now + ttl)
  redis.call('HSET', key, me, entry, TABLE, whole(born) .. ' ' .. whole(rebuilt_until))
  local last = now + ttl
  for i = 1, n do if ends[i] > last then last = ends[i] end end
  redis.call('PEXPIREAT', key, whole(last))
  return { fmt(grant), fmt(fair), previous, fmt(mine_now), whole(born), whole(last), tostring(n) }
end

-- The error's code word (WRONGTYPE, OOM, ERR), from what pcall caught: a table on Redis 7, a string before.
local function kind(err)
  local text = type(err) == 'table' and (err.err or '') or tostring(err)
  return string.match(text, '(%u%u+)') or 'ERR'
end

local out, o = {}, 0
for i = 1, #KEYS do
  local ok, r = pcall(share, KEYS[i], 2 + (i - 1) * 8)
  if not ok then r = { kind(r), '', '', '', '', '', '' } end
  for j = 1, 7 do out[o + j] = r[j] end
  o = o + 7
end
return out
