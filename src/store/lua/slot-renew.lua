--[[
  slot-renew: renews holders of one counter's slots (src/store/redis-slot-leases.ts): the keys slots.lua keeps.
  KEYS[1]  the sorted set: holder -> when its lease ends (ms); KEYS[2] the hash of what each holds
  ARGV[1]  now in ms, or "0" to use Redis's clock (TIME), as check-and-incr.lua; then per holder: its id, the
           lease a renewal gives (ms), when renewals stop (ms)
  Returns per holder 1 (renewed: its lease ends at min(now + lease, end), never sooner than it did) or 0 (to drop
  from the list: it holds nothing, its lease ended, or it is at its end). A renewal never brings back a slot
  that was given back or whose lease ended: only a holder still in the set is renewed.
]]
local now = tonumber(ARGV[1])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local out, latest = {}, 0
for i = 2, #ARGV, 3 do
  local id, lease, stop = ARGV[i], tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
  local at = tonumber(redis.call('ZSCORE', KEYS[1], id))
  if at == nil or at <= now or now >= stop then
    out[#out + 1] = 0
  else
    local til = math.min(now + lease, stop)
    if til > at then redis.call('ZADD', KEYS[1], til, id) end
    if til > latest then latest = til end
    out[#out + 1] = 1
  end
end
-- Both keys outlive the latest lease by a second, as slots.lua sets them; never shortened.
if latest > 0 and redis.call('PTTL', KEYS[1]) < latest - now + 1000 then
  redis.call('PEXPIRE', KEYS[1], latest - now + 1000)
  redis.call('PEXPIRE', KEYS[2], latest - now + 1000)
end
return out
