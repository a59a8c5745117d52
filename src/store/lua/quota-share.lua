--[[
  quota-share: one RLQS instance's grant for one bucket, in one atomic step, so no two replicas can hand out the
  same room (src/counters/fair-share.ts reserve() is the same arithmetic, and the memory store's):
    fair   = the instance's max-min fair share of the capacity among every live entry (its demand first)
    grant  = max(0, min(fair, capacity - the sum of what the other live entries hold))
    held   = max(grant, what its Envoy runs now): what its entry holds, so a shrink frees room once it was sent
  Run by src/store/redis-share-store.ts with EVALSHA (EVAL when Redis has not cached it yet).

  KEYS[1]  the bucket's share hash (src/counters/keys.ts demandKey): field = an instance's fingerprint, value =
           "<demand> <held> <expires_ms>", demand in requests a second (-1: not known yet)
  ARGV[1]  the instance's fingerprint
  ARGV[2]  its planned demand (-1: not known yet)
  ARGV[3]  the capacity: what the fleet may admit, requests a second
  ARGV[4]  how long its entry lives without a newer report, in ms
  ARGV[5]  most instances kept: past it, the entries nearest their end are dropped
  ARGV[6]  the rate its Envoy may be running now (what it was last sent)

  Expiry is read on Redis's clock (TIME), which every replica shares. The hash expires with its longest-lived
  entry, so a bucket nobody reports any more leaves nothing behind. An entry that cannot be read, or ends more
  than a week away (no report interval makes that; another writer did), is deleted, not used.

  Returns  { grant, fair, what it held before or "-1" for a new entry, what it holds now }, as strings (a Lua
           number returned to Redis would lose its fraction).
]]

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local me, ttl, cap = ARGV[1], tonumber(ARGV[4]), tonumber(ARGV[5])
local demand = tonumber(ARGV[2])
if demand < 0 then demand = math.huge end
local capacity = tonumber(ARGV[3])

-- The live entries but this instance's, in parallel arrays (no table per entry); expired and unreadable ones
-- are deleted.
local all = redis.call('HGETALL', KEYS[1])
local ids, demands, granted, ends = {}, {}, {}, {}
local previous = '-1'
local n = 0
for i = 1, #all, 2 do
  local d, g, e = string.match(all[i + 1], '^(%S+) (%S+) (%d+)$')
  local at, dd, gg = tonumber(e), tonumber(d), tonumber(g)
  if all[i] == me then
    if g then previous = g end
  elseif at == nil or dd == nil or gg == nil or at <= now or at > now + 604800000 then
    redis.call('HDEL', KEYS[1], all[i])
  else
    n = n + 1
    ids[n], granted[n], ends[n] = all[i], gg, at
    if dd < 0 then demands[n] = math.huge else demands[n] = dd end
  end
end

-- Past the bound, the entries nearest their end go (a rare path: a closure sort is fine here).
if n >= cap then
  local order = {}
  for i = 1, n do order[i] = i end
  table.sort(order, function(a, b) return ends[a] < ends[b] end)
  local drop = {}
  for i = 1, n - cap + 1 do
    drop[order[i]] = true
    redis.call('HDEL', KEYS[1], ids[order[i]])
  end
  local keep = 0
  for i = 1, n do
    if not drop[i] then
      keep = keep + 1
      ids[keep], demands[keep], granted[keep], ends[keep] = ids[i], demands[i], granted[i], ends[i]
    end
  end
  for i = keep + 1, n do ids[i], demands[i], granted[i], ends[i] = nil, nil, nil, nil end
  n = keep
end

-- The water level (counters/fair-share.ts waterLevel): demands sorted as numbers; in order, while a demand is
-- under an equal split of what is left it takes itself, else every demand from there on gets that split; if all
-- fit, what is left is split among all.
local held = 0
local sorted = { demand }
for i = 1, n do
  sorted[i + 1] = demands[i]
  held = held + granted[i]
end
table.sort(sorted)
local total = n + 1
local fair = 0
if capacity > 0 then
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
  fair = math.min(demand, level) + spare
end

local grant = math.max(0, math.min(fair, capacity - held))
local mine = math.max(grant, tonumber(ARGV[6]))
local fmt = function(x) return string.format('%.17g', x) end
redis.call('HSET', KEYS[1], me, (demand == math.huge and '-1' or fmt(demand)) .. ' ' .. fmt(mine) .. ' ' .. string.format('%.0f', now + ttl))
local last = now + ttl
for i = 1, n do if ends[i] > last then last = ends[i] end end
redis.call('PEXPIREAT', KEYS[1], string.format('%.0f', last))
return { fmt(grant), fmt(fair), previous, fmt(mine) }
