--[[
  quota-share: RLQS grants for a batch of buckets of one report, each bucket in one atomic step, so no two
  replicas can hand out the same room (src/counters/fair-share.ts is the same arithmetic, and the memory
  store's, src/rlqs/shares/share-store.ts):
    plan   = from every live entry's demand at once (planShares): the water level, the spare, and the factor
             holding the headroom of instances under the level to a tenth of the capacity; kept in the table
             ("~plan", with the sum of what every entry holds) and made afresh only when a fifth of the report
             interval has passed, the instance is new, the table is rebuilt, or the capacity or this instance's
             demand moved it by more than 2 % of the capacity. So a call reads three fields, not the table: its
             cost does not grow with the instances a bucket holds, but for the periodic re-plan (one per fifth of
             an interval, whatever the number of calls)
    fair   = the instance's share under the plan (fairOf)
    grant  = max(0, min(fair, 1.1 x capacity - what the other entries hold, limit)); kept at what its Envoy
             runs when within 10 % of it (a changed bucket may start full: a change must be worth a refill)
             limit = what its Envoy runs now while the table is rebuilt (see below), else no limit
    held   = max(grant, what its Envoy runs now): what its entry holds, so a shrink frees room once it was sent
    tell   = the grant is held below its fair share by more than 2 % of the capacity, and no caller was told so
             for one report interval: the caller publishes the bucket, once per interval at most
  Run by src/rlqs/shares/redis-share-store.ts with EVALSHA (EVAL when Redis has not cached it yet), for up to a few
  dozen buckets at a time (one Redis Cluster slot per call).

  KEYS[i]  bucket i's share hash (src/counters/keys.ts demandKey): field = an instance's fingerprint, value =
           "<demand> <held> <expires_ms>", demand in requests a second (-1: not known yet); and the field
           "~table" = "<born_us> <rebuilt_until_ms>": when the table was made (µs: a stamp no other table of this
           key has), and until when it is rebuilt; and "~plan" = "<capacity> <level, -1 for none> <spare> <scale>
           <held_sum> <planned_at_ms> <told_at_ms> <ends_ms>"
  ARGV[1]  most instances kept per bucket: past it, the entries nearest their end are dropped
  then per bucket, 9 values:
           the instance's fingerprint
           its demand (-1: not known yet)
           the capacity: what the fleet may admit, requests a second
           how long its entry lives without a newer report, in ms
           the rate its Envoy may be running now (what it was last sent)
           when the table the caller last saw was made (µs), or 0 if it knows none
           until when that table was to live (ms; 0 if none)
           how long a table found lost is rebuilt, in ms
           Envoy's report interval, in ms

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
           when the table was made, until when it lives, "1" to tell else "0" } as strings (a Lua number returned
           to Redis would lose its fraction); for a bucket whose key Redis refused (a key of another type) the
           error's first word (WRONGTYPE) and six empty strings: that bucket fails alone.
]]

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local cap = tonumber(ARGV[1])
local TABLE, PLAN = '~table', '~plan'
local POOL, HYSTERESIS, SHIFT, WORTH = 0.1, 0.1, 0.02, 0.02
local fmt = function(x) return string.format('%.17g', x) end
local whole = function(x) return string.format('%.0f', x) end

-- The water level (counters/fair-share.ts waterLevel) of demands[1..n]: sorted as numbers; in order, while a
-- demand is under an equal split of what is left it takes itself, else every demand from there on gets that
-- split; if all fit, what is left is split among all (the spare).
local function water_level(capacity, sorted, n)
  local left = capacity
  for k = 1, n do
    local equal = left / (n - k + 1)
    if sorted[k] >= equal then return equal, 0 end
    left = left - sorted[k]
  end
  return math.huge, left / n
end

-- A number, not nil, NaN or infinite: Lua 5.1's tonumber reads "nan", "inf" and hex, which no writer of ours makes.
local function finite(x) return x ~= nil and x == x and x ~= math.huge and x ~= -math.huge end

local function headroom(d) return math.max(0.5, d * 0.1) end

-- counters/fair-share.ts planShares: level, spare and the factor that holds the headroom to POOL, added in
-- sorted order (a hash's order is not its writes' once it grows).
local function plan_shares(capacity, demands, n)
  if not (capacity > 0) then return { capacity, 0, 0, 0 } end
  local sorted = {}
  for i = 1, n do sorted[i] = math.max(demands[i], 0) end
  table.sort(sorted)
  local level, spare = water_level(capacity, sorted, n)
  if level == math.huge then return { capacity, level, spare, 0 } end
  local want = 0
  for i = 1, n do
    local d = sorted[i]
    if d < level then want = want + math.min(level - d, headroom(d)) end
  end
  local pool = capacity * POOL
  local scale = 1
  if want > pool then scale = pool / want end
  return { capacity, level, spare, scale }
end

-- counters/fair-share.ts fairOf.
local function fair_of(p, demand)
  if not (p[1] > 0) then return 0 end
  local d = math.max(demand, 0)
  if d >= p[2] then return p[2] end
  return d + p[3] + math.min(p[2] - d, headroom(d)) * p[4]
end

-- counters/fair-share.ts demandMoved.
local function moved(p, before, after)
  if before == math.huge or after == math.huge then return before ~= after end
  local a, b = math.min(math.max(after, 0), p[2]), math.min(math.max(before, 0), p[2])
  return math.abs(a - b) > SHIFT * p[1]
end

-- An entry "<demand> <held> <expires_ms>": its numbers, demand -1 read as not known (math.huge); nil if unreadable.
local function parse(v)
  if not v then return nil end
  local d, g, e = string.match(v, '^(%S+) (%S+) (%d+)$')
  local dd, gg, at = tonumber(d), tonumber(g), tonumber(e)
  if not (finite(dd) and finite(gg) and finite(at)) or gg < 0 then return nil end
  if dd < 0 then dd = math.huge end
  return dd, gg, at
end

-- The kept plan "<capacity> <level|-1> <spare> <scale> <held_sum> <at_ms> <told_ms> <end_ms>" (one of another shape,
-- an older script's, reads as none: the table is planned afresh).
local function parse_plan(v)
  if not v then return nil end
  local f = {}
  for x in string.gmatch(v, '%S+') do f[#f + 1] = tonumber(x) end
  if #f ~= 8 then return nil end
  for i = 1, 8 do if not finite(f[i]) then return nil end end
  if f[2] < 0 then f[2] = math.huge end
  return { plan = { f[1], f[2], f[3], f[4] }, held_sum = f[5], at = f[6], told = f[7], ends = f[8] }
end

local function format_plan(s)
  local level = s.plan[2] == math.huge and '-1' or fmt(s.plan[2])
  return table.concat({ fmt(s.plan[1]), level, fmt(s.plan[3]), fmt(s.plan[4]), fmt(s.held_sum), whole(s.at),
    whole(s.told), whole(s.ends) }, ' ')
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
  return keep
end

-- The whole table read (the periodic re-plan): expired and unreadable entries deleted, the bound kept, what
-- every entry holds summed (this instance's old grant first), the plan made from every demand (this one's
-- first), in the table's order as share-store.ts adds them.
local function replan(key, me, demand, capacity, ttl, my_held, told)
  local all = redis.call('HGETALL', key)
  local ids, demands, granted, ends = {}, {}, {}, {}
  local n = 0
  for i = 1, #all, 2 do
    local id = all[i]
    if id ~= TABLE and id ~= PLAN and id ~= me then
      local dd, gg, at = parse(all[i + 1])
      if dd == nil or at <= now or at > now + 604800000 then
        redis.call('HDEL', key, id)
      else
        n = n + 1
        ids[n], demands[n + 1], granted[n], ends[n] = id, dd, gg, at
      end
    end
  end
  if n >= cap then
    local others = {}
    for i = 1, n do others[i] = demands[i + 1] end
    n = drop_nearest_end(key, ids, others, granted, ends, n)
    for i = 1, n do demands[i + 1] = others[i] end
  end
  demands[1] = demand
  local held_sum, last = my_held, now + ttl
  for i = 1, n do
    held_sum = held_sum + granted[i]
    if ends[i] > last then last = ends[i] end
  end
  return { plan = plan_shares(capacity, demands, n + 1), held_sum = held_sum, at = now, told = told, ends = last }
end

-- One bucket: its arguments start at ARGV[a].
local function share(key, a)
  local me, demand, capacity = ARGV[a], tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  local ttl, running = tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
  local seen_born, seen_end, rebuild = tonumber(ARGV[a + 5]), tonumber(ARGV[a + 6]), tonumber(ARGV[a + 7])
  local interval = tonumber(ARGV[a + 8])
  if demand < 0 then demand = math.huge end

  local v = redis.call('HMGET', key, me, TABLE, PLAN)
  local my_demand, my_held = parse(v[1])
  local born, rebuilt_until = nil, 0
  if v[2] then
    local b, r = string.match(v[2], '^(%d+) (%d+)$')
    born, rebuilt_until = tonumber(b), tonumber(r) or 0
  end
  if born == nil then born = now_us end
  -- Lost: younger than the table the caller saw while that one should still live, or this instance runs a
  -- grant its table no longer holds.
  if (seen_born > 0 and now < seen_end and born ~= seen_born) or (running > 0 and my_held == nil) then
    if now + rebuild > rebuilt_until then rebuilt_until = now + rebuild end
  end
  local rebuilding = now < rebuilt_until

  local s = parse_plan(v[3])
  if s == nil or my_held == nil or rebuilding or now < s.at or now - s.at >= interval / 5
    or math.abs(capacity - s.plan[1]) > SHIFT * s.plan[1] or moved(s.plan, my_demand, demand) then
    s = replan(key, me, demand, capacity, ttl, my_held or 0, s and s.told or -1e15)
  end

  -- counters/fair-share.ts grantUnder.
  local held_by_others = s.held_sum - (my_held or 0)
  local fair = fair_of(s.plan, demand)
  local room = capacity + capacity * POOL - held_by_others
  local grant = math.max(0, math.min(fair, room))
  if rebuilding then grant = math.min(grant, running) end
  if running > 0 and math.abs(grant - running) <= HYSTERESIS * running then
    grant = running
  end
  -- fair-share.ts heldOf: a multiple of 2^-20, so the sum of what entries hold is exact in any order.
  local mine_now = math.ceil(math.max(grant, running) * 1048576) / 1048576
  s.held_sum = held_by_others + mine_now
  local tell = grant < fair - WORTH * capacity and now - s.told >= interval
  if tell then s.told = now end
  if now + ttl > s.ends then s.ends = now + ttl end
  local entry = (demand == math.huge and '-1' or fmt(demand)) .. ' ' .. fmt(mine_now) .. ' ' .. whole(now + ttl)
  redis.call('HSET', key, me, entry, TABLE, whole(born) .. ' ' .. whole(rebuilt_until), PLAN, format_plan(s))
  redis.call('PEXPIREAT', key, whole(s.ends))
  local previous = my_held and fmt(my_held) or '-1'
  return { fmt(grant), fmt(fair), previous, fmt(mine_now), whole(born), whole(s.ends), tell and '1' or '0' }
end

-- The error's code word (WRONGTYPE, OOM, ERR), from what pcall caught: a table on Redis 7, a string before.
local function kind(err)
  local text = type(err) == 'table' and (err.err or '') or tostring(err)
  return string.match(text, '(%u%u+)') or 'ERR'
end

local out, o = {}, 0
for i = 1, #KEYS do
  local ok, r = pcall(share, KEYS[i], 2 + (i - 1) * 9)
  if not ok then r = { kind(r), '', '', '', '', '', '' } end
  for j = 1, 7 do out[o + j] = r[j] end
  o = o + 7
end
return out
