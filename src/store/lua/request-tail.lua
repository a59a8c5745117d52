--[[
  Part of check-and-incr.lua, included where it says --#include request-tail.lua: what a request that is not
  plain carries after its windows (the header's r, f, t and u). Uses the script's locals: ARGV, K, k_at,
  r_k, r_rsv, r_charge, r_spend, r_usage, slots_of.
]]

-- Reads request `req`'s reservations (in order, and by group, with their three keys), its in-flight checks
-- (each with its holders' hash), its spend lists and its ledger streams (each with its key), from ARGV[a] and the keys after
-- K[k_at + k]; returns where the next request's arguments and keys start.
local function read_tail(a, k, req)
  local rsv = { list = {}, by_group = {} }
  r_rsv[req] = rsv
  local r = tonumber(ARGV[a])
  for x = 1, r do
    local b = a + (x - 1) * 4
    local one = {
      group = ARGV[b + 1], id = ARGV[b + 2], ttl = tonumber(ARGV[b + 3]), settles = ARGV[b + 4] == '1',
      hash = K[k_at + k + 1], exp = K[k_at + k + 2], done = K[k_at + k + 3],
    }
    rsv.list[x] = one
    rsv.by_group[one.group] = one
    k = k + 3
  end
  a = a + 1 + r * 4
  local f = tonumber(ARGV[a])
  for x = 1, f do
    local j = r_k[req] + tonumber(ARGV[a + (x - 1) * 2 + 1])
    local id = ARGV[a + (x - 1) * 2 + 2]
    if id == '' then id = nil end
    slots_of[j] = { id = id, set = K[k_at + j], hash = K[k_at + k + x] }
  end
  k = k + f
  if f > 0 then r_charge[req] = true end
  a = a + 1 + f * 2
  local t, spend = tonumber(ARGV[a]), {}
  for x = 1, t do
    spend[x] = { i = tonumber(ARGV[a + (x - 1) * 2 + 1]), member = ARGV[a + (x - 1) * 2 + 2], list = K[k_at + k + x] }
  end
  r_spend[req] = spend
  a, k = a + 1 + t * 2, k + t
  local u, usage = tonumber(ARGV[a]), {}
  for x = 1, u do
    local b = a + (x - 1) * 7
    usage[x] = {
      i = tonumber(ARGV[b + 1]), maxlen = ARGV[b + 2], domain = ARGV[b + 3], rule = ARGV[b + 4], window = ARGV[b + 5],
      counter = ARGV[b + 6], values = ARGV[b + 7], stream = K[k_at + k + x],
    }
  end
  r_usage[req] = usage
  return a + 1 + u * 7, k + u
end
