--[[
  Part of check-and-incr.lua, included in charges.lua's scope (where it says --#include slots.lua), and of
  slot-census.lua (which uses slot_leases only): the slots
  of an in_flight rule, decided as src/limits/charge-rules.ts decideCharges (kinds take, again, return) and
  kept as src/store/memory-slots.ts keeps them. It uses the script's locals: call, max, now, tonumber.

  Per counter, two keys with the counter's hash tag:
    <key>     a sorted set: holder -> when its lease ends (ms)
    <key>:h   a hash: holder -> slots it holds; '#held' -> slots held in all, '#seq' -> the last number given
              to a holder without an id ('#<n>'; an id is a fingerprint, hex, so never starts with '#')
  Both expire together, a second after the latest lease.
]]

-- Leases ended per call, at most: a call's work stays bounded whatever ran out; the rest end at later calls
-- (until then they count as held: a refusal too many, never an admission too many).
local SLOT_PURGE = 100
-- Holders read or removed by one command, at most: Lua's unpack takes a few thousand values.
local SLOT_CHUNK = 1000
-- Slots a give-back without an id returns, at most, per descriptor (charge-rules.ts SLOT_GIVE_BACK): each is a
-- holder or more, so its work is bounded whatever hits it names; the rest come back by their leases. Envoy
-- gives back one request's (its hits_addend) at a time.
local SLOT_GIVE_BACK = 100

-- Holders whose lease ended: their slots come back (written only when counting). Returns how many.
local function slot_leases(x, count_it)
  local due = call('ZRANGEBYSCORE', x.set, '-inf', now, 'LIMIT', 0, SLOT_PURGE)
  if #due == 0 then return 0 end
  local held = call('HMGET', x.hash, unpack(due))
  local expired = 0
  for i = 1, #due do expired = expired + (tonumber(held[i]) or 0) end
  if count_it then
    call('ZREM', x.set, unpack(due))
    call('HDEL', x.hash, unpack(due))
    call('HINCRBY', x.hash, '#held', -expired)
  end
  return expired
end

-- Window j's slots: its kind, the slots held before the request, what it asks, and whether it is over.
-- `pending`: slots this request's earlier takes on the same counter ask for (one request's descriptors
-- never take more than the limit together).
local function slot_window(w, x, count_it, pending)
  x.expired = slot_leases(x, count_it)
  -- The id's own holding. One whose lease ended but no purge reached yet (more than SLOT_PURGE ended at once)
  -- holds nothing, and ends now when counting, so a new take by the id starts afresh.
  local mine = 0
  if x.id then
    mine = tonumber(call('HGET', x.hash, x.id)) or 0
    if mine > 0 and tonumber(call('ZSCORE', x.set, x.id) or 0) <= now then
      if count_it then
        call('ZREM', x.set, x.id)
        call('HDEL', x.hash, x.id)
        call('HINCRBY', x.hash, '#held', -mine)
        x.expired = x.expired + mine
      end
      mine = 0
    end
  end
  local held = tonumber(call('HGET', x.hash, '#held')) or 0
  if not count_it then held = held - x.expired end
  if held < 0 then held = 0 end
  if w.hits < 0 then
    local back = mine
    if not x.id then back = math.min(-w.hits, held, SLOT_GIVE_BACK) end
    return 'return', held, 0, -back, false
  end
  if mine > 0 then return 'again', held, 0, 0, false end
  local before = pending[x.set] or 0
  pending[x.set] = before + w.hits
  return 'take', held, 0, w.hits, held + before + max(w.hits, 1) > w.limit
end

-- Writes what a slots check counted: n > 0 slots taken (by the id, or by a new holder), n < 0 given back
-- (the id's, or those of the holders whose leases end soonest: the sorted set's order).
local function slot_write(w, x, n)
  if n > 0 then
    local id = x.id or ('#' .. call('HINCRBY', x.hash, '#seq', 1))
    -- The same id twice in one request: one holding, of the last take's slots.
    local before = tonumber(call('HGET', x.hash, id)) or 0
    call('ZADD', x.set, now + w.window, id)
    call('HSET', x.hash, id, n)
    call('HINCRBY', x.hash, '#held', n - before)
    -- Never shortened: a holder taken under a longer lease (before a reload) keeps its keys.
    if call('PTTL', x.set) < w.window + 1000 then
      call('PEXPIRE', x.set, w.window + 1000)
      call('PEXPIRE', x.hash, w.window + 1000)
    end
    return
  end
  if x.id then
    call('ZREM', x.set, x.id)
    call('HDEL', x.hash, x.id)
    call('HINCRBY', x.hash, '#held', n)
    return
  end
  -- The oldest holders, SLOT_CHUNK at a time (unpack's bound): each holds one slot or more, so a give-back
  -- touches at most as many holders as it returns slots, each once (every holder was a take).
  local left = -n
  while left > 0 do
    local oldest = call('ZRANGE', x.set, 0, math.min(left, SLOT_CHUNK) - 1)
    if #oldest == 0 then break end
    local has, gone = call('HMGET', x.hash, unpack(oldest)), {}
    for i = 1, #oldest do
      local h = tonumber(has[i]) or 0
      if h <= left then
        gone[#gone + 1] = oldest[i]
        left = left - h
      else
        call('HSET', x.hash, oldest[i], h - left)
        left = 0
        break
      end
    end
    if #gone > 0 then
      call('ZREM', x.set, unpack(gone))
      call('HDEL', x.hash, unpack(gone))
    end
  end
  call('HINCRBY', x.hash, '#held', n + left)
end
