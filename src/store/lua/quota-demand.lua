--[[
  quota-demand: one instance's demand for one RLQS bucket written, and the bucket's live table read back, in one
  atomic step, so every replica computes shares from the same table. Run by src/store/redis-demand-store.ts
  with EVALSHA (EVAL when Redis has not cached it yet).

  KEYS[1]  the bucket's demand hash (src/counters/keys.ts demandKey): field = an instance's fingerprint,
           value = "<demand> <expires_ms>", demand in requests a second (-1: not known yet)
  ARGV[1]  the instance's fingerprint
  ARGV[2]  its demand
  ARGV[3]  how long its entry lives without a newer report, in ms
  ARGV[4]  most instances kept: past it, the entries nearest their end are dropped

  Expiry is read on Redis's clock (TIME), which every replica shares. The hash itself expires with its
  longest-lived entry, so a bucket nobody reports any more leaves nothing behind.

  Returns  { instance, demand, instance, demand, ... } of every live entry, this one included.
]]

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[3])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ' ' .. (now + ttl))

local all = redis.call('HGETALL', KEYS[1])
local out, ends, last = {}, {}, 0
for i = 1, #all, 2 do
  local demand, ends_at = string.match(all[i + 1], '^(%S+) (%d+)$')
  ends_at = tonumber(ends_at)
  if ends_at == nil or ends_at <= now then
    redis.call('HDEL', KEYS[1], all[i])
  else
    out[#out + 1] = all[i]
    out[#out + 1] = demand
    ends[#ends + 1] = { all[i], ends_at }
    if ends_at > last then last = ends_at end
  end
end

local cap = tonumber(ARGV[4])
if #ends > cap then
  table.sort(ends, function(a, b) return a[2] < b[2] end)
  local drop = {}
  for i = 1, #ends - cap do
    redis.call('HDEL', KEYS[1], ends[i][1])
    drop[ends[i][1]] = true
  end
  local kept = {}
  for i = 1, #out, 2 do
    if not drop[out[i]] then
      kept[#kept + 1] = out[i]
      kept[#kept + 1] = out[i + 1]
    end
  end
  out = kept
end

redis.call('PEXPIREAT', KEYS[1], last)
return out
