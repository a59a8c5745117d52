--[[
  slot-note: adds entries to a bounded list (a hash): a peer's list of renewed slots (src/store/redis-slot-leases.ts,
  store.ts SlotLeases), or a rule's list of counters for its census (src/store/redis-slot-census.ts).
  KEYS[1]  the list: a peer's, '<slots key>\n<holder>' -> '<lease ms>:<end ms>' (the slots key without the
           store's prefix: slots.lua's <key>; the holder: a request id's fingerprint); a rule's,
           '<slots key>' -> '<limit>:<when listed, ms>'
  ARGV[1]  entries it may hold, at most; ARGV[2] how long it lives, in ms, at least; then field, value pairs
  Returns how many did not fit: their slots keep the one lease they were taken with.
]]
local max, ttl = tonumber(ARGV[1]), tonumber(ARGV[2])
local n = redis.call('HLEN', KEYS[1])
local left = 0
for i = 3, #ARGV, 2 do
  if n < max or redis.call('HEXISTS', KEYS[1], ARGV[i]) == 1 then
    n = n + redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
  else
    left = left + 1
  end
end
if n > 0 and redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end
return left
