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

-- The live entries but this instance's; expired and unreadable ones are deleted.
local all = redis.call('HGETALL', KEYS[1])
local others, previous = {}, '-1'
for i = 1, #all, 2 do
  local d, g, e = string.match(all[i + 1], '^(%S+) (%S+) (%d+)$')
  local ends = tonumber(e)
  if all[i] == me then
    if g then previous = g end
  elseif ends == nil or tonumber(d) == nil or tonumber(g) == nil or ends <= now or ends > now + 604800000 then
    redis.call('HDEL', KEYS[1], all[i])
  else
    local dd = tonumber(d)
    if dd < 0 then dd = math.huge end
    others[#others + 1] = { id = all[i], demand = dd, granted = tonumber(g), ends = ends }
  end
end

-- Past the bound, the entries nearest their end go.
if #others >= cap then
  table.sort(others, function(a, b) return a.ends < b.ends end)
  local kept = {}
  for i = 1, #others do
    if i <= #others - cap + 1 then redis.call('HDEL', KEYS[1], others[i].id) else kept[#kept + 1] = others[i] end
  end
  others = kept
end

-- Water-filling (fairShares): in order of demand, each takes the lesser of its demand and an equal split of
-- what is left; what nobody asked for is then split among all. This instance is index 0 and sorts first among
-- equal demands, as the TypeScript sort by (demand, index) does.
local order = { { demand = demand, idx = 0 } }
local held = 0
for i = 1, #others do
  order[#order + 1] = { demand = others[i].demand, idx = i }
  held = held + others[i].granted
end
table.sort(order, function(a, b)
  if a.demand ~= b.demand then return a.demand < b.demand end
  return a.idx < b.idx
end)
local left, n, fair = capacity, #order, 0
if capacity > 0 then
  for k = 1, n do
    local equal = left / (n - k + 1)
    local give = math.min(math.max(order[k].demand, 0), equal)
    if order[k].idx == 0 then fair = give end
    left = left - give
  end
  if left > 0 then fair = fair + left / n end
end

local grant = math.max(0, math.min(fair, capacity - held))
local mine = math.max(grant, tonumber(ARGV[6]))
local fmt = function(x) return string.format('%.17g', x) end
redis.call('HSET', KEYS[1], me, (demand == math.huge and '-1' or fmt(demand)) .. ' ' .. fmt(mine) .. ' ' .. string.format('%.0f', now + ttl))
local last = now + ttl
for i = 1, #others do if others[i].ends > last then last = others[i].ends end end
redis.call('PEXPIREAT', KEYS[1], string.format('%.0f', last))
return { fmt(grant), fmt(fair), previous, fmt(mine) }
