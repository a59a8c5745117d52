--[[
  slot-census: one counter of an in_flight rule, counted where it is (src/store/redis-slot-census.ts): the
  leases that ran out end, as a take's would (slots.lua's slot_leases, at most SLOT_PURGE a call), and what
  is held is read.
  KEYS[1]  the sorted set of holders by lease end; KEYS[2] the hash of what each holds (slots.lua)
  ARGV[1]  now in ms, or "0" to use Redis's clock (TIME), as check-and-incr.lua
  Returns { slots held, slots whose lease it ended }.
]]
local call, max, tonumber = redis.call, math.max, tonumber
local now = tonumber(ARGV[1])
if now == 0 then
  local t = call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
--#include slots.lua
local x = { set = KEYS[1], hash = KEYS[2] }
local expired = slot_leases(x, true)
return { max(0, tonumber(call('HGET', x.hash, '#held')) or 0), expired }
