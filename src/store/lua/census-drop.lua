--[[
  census-drop: drops entries from a list (a hash: slot-note.lua's) only if they still hold the value read: counters
  a census found holding no slot (src/store/redis-slot-census.ts), unless a take listed them again meanwhile; slots
  a renewal found gone (src/store/redis-slot-leases.ts), unless the id took a slot again meanwhile.
  KEYS[1]  the list
  ARGV     field, value pairs, as the census read them
  Returns how many it dropped.
]]
local dropped = 0
for i = 1, #ARGV, 2 do
  if redis.call('HGET', KEYS[1], ARGV[i]) == ARGV[i + 1] then dropped = dropped + redis.call('HDEL', KEYS[1], ARGV[i]) end
end
return dropped
