--[[
  Part of check-and-incr.lua, included where it says --#include counts.lua: how a counter is read, and what
  a key's error says of its request. Uses the script's local values; on_node is true in the Cluster variant.
]]

-- A count is what INCRBY reads as one (Redis's string2ll, src/util.c): "0", or an optional minus and digits
-- without a leading zero, nothing before or after. tonumber reads more ("1e1", "0x5", " 5", "5.0", "nan",
-- "-inf"), which INCRBY would refuse after the request's other windows were written. At most 18 characters,
-- so no INCRBY of a count overflows 64 bits (a count Tollgate writes has at most 10 digits). A number is an
-- INCRBY's reply earlier in this batch (write() and decide_counting keep it), a count by construction. A plain
-- request that counts reads through INCRBY itself, which refuses what string2ll does not read (key_error).
local find = string.find

-- What a key's error says of the request: a counter that is not one (INCRBY's own refusal of a value it cannot
-- read as an integer, or would overflow) is WRONGTYPE, as is_count finds it; on a Cluster node (the variant of
-- redis-script.ts), a key this node does not serve is NOTLOCAL, which ends the batch there (see Returns).
local on_node = false
local function key_error(e)
  local text = e.err or ''
  if on_node and find(text, 'Script attempted', 1, true) then return { err = 'NOTLOCAL ' .. text } end
  if find(text, 'not an integer', 1, true) or find(text, 'overflow', 1, true) then
    return { err = 'WRONGTYPE counter value is not a count' }
  end
  return e
end

-- A counter not read up front (a plain request's window that only checks): GET, kept for the batch. A key of
-- another type reads as absent, as MGET reads it.
local function read(n)
  local v = redis.pcall('GET', n)
  if type(v) == 'table' then
    if not find(v.err or '', 'WRONGTYPE', 1, true) then error(key_error(v)) end
    v = false
  end
  values[n] = v
  return v
end

local function is_count(v)
  return type(v) == 'number' or v == '0' or (#v <= 18 and find(v, '^%-?[1-9]%d*$') ~= nil)
end

-- A counter's count: 0 when absent (MGET's false, also for a key of another type, which the write then
-- refuses); an error for a value that is not a count, so the request fails before writing anything.
local function count(n)
  local v = values[n]
  if v == nil then v = read(n) end
  if not v then return 0 end
  if not is_count(v) then error({ err = 'WRONGTYPE counter value is not a count' }) end
  return tonumber(v)
end
