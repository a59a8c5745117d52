--[[
  Part of check-and-incr.lua, included where it says --#include charges.lua (src/store/redis-store.ts
  assembles the script): a request with a charge window (charge_mode), decided as src/limits/charge-rules.ts
  decideCharges. It uses the script's locals: call, max, now, cur, values, shape_of, group_of, slots_of, the
  kinds' read and add, answer_windows, bounds, out, o, group_over and quota_group; a request's spend lists
  come as `spend` and its ledger streams as `usage` (check-and-incr.lua's r_spend, r_usage).
]]

-- The usage ledger: usage_reachable, usage_event, usage_events.
--#include usage.lua

-- A reservation's records: what src/store/memory-reservations.ts keeps, with the same bounds per counter. The
-- hash holds every record (id -> "r <estimate> <ms reserved>" open, "e <estimate> <ms reserved>" ended
-- unsettled, "x" refused, "s" settled); x.exp the open ones by expiry, x.done the ended ones by when they are
-- forgotten. Only open ones make a counter full; ended ones are kept at most MAX_ENDED, the soonest
-- forgotten dropped first, and never refuse anything.
local MAX_RESERVATIONS_PER_COUNTER = 10000
local MAX_ENDED_PER_COUNTER = 1000
-- Ends or forgets at most PURGE records of each kind a call, so a call's work stays bounded whatever expired.
local PURGE = 100

-- Every key of a reservation lives as long as its longest record can: an open one's ttl, then as ended.
local function keep(x)
  local ms = 2 * x.ttl + 1000
  call('PEXPIRE', x.hash, ms)
  call('PEXPIRE', x.exp, ms)
  call('PEXPIRE', x.done, ms)
end

-- Makes id's record the ended value v, forgotten at until_ms; the counter's oldest ended one goes first when
-- it holds MAX_ENDED_PER_COUNTER.
local function end_record(x, id, v, until_ms)
  call('ZREM', x.exp, id)
  call('ZREM', x.done, id)
  if call('ZCARD', x.done) >= MAX_ENDED_PER_COUNTER then
    local oldest = call('ZRANGE', x.done, 0, 0)[1]
    call('ZREM', x.done, oldest)
    call('HDEL', x.hash, oldest)
  end
  call('HSET', x.hash, id, v)
  call('ZADD', x.done, until_ms, id)
end

-- Open reservations past their ttl end unsettled (charged at their estimate, their record kept one more ttl
-- so a late settlement is netted against it), each with its ledger event (`u`: the rule's ledger) written with
-- its record; ended records past their time are forgotten. Returns how many ended unsettled.
local function purge(x, u)
  local expired = 0
  local due = call('ZRANGEBYSCORE', x.exp, '-inf', now, 'WITHSCORES', 'LIMIT', 0, PURGE)
  for i = 1, #due, 2 do
    local id = due[i]
    local v = call('HGET', x.hash, id) or 'x'
    if string.sub(v, 1, 1) == 'r' then
      expired = expired + 1
      v = 'e' .. string.sub(v, 2)
      if u then
        local est = tonumber(string.match(v, '^e (%d+)'))
        usage_event(u, 'expired', est, est, id, tonumber(due[i + 1]))
      end
    end
    end_record(x, id, v, tonumber(due[i + 1]) + x.ttl)
  end
  local gone = call('ZRANGEBYSCORE', x.done, '-inf', now, 'LIMIT', 0, PURGE)
  for _, id in ipairs(gone) do
    call('ZREM', x.done, id)
    call('HDEL', x.hash, id)
  end
  return expired
end

-- Reads reservation x's record into x.kind (reserve, settle, unreserved, late or full; x.est and x.at for
-- settle), after ending and forgetting what is due (count_it only); returns how many ended unsettled.
local function look_up(x, count_it, u)
  local expired = 0
  if count_it then expired = purge(x, u) end
  local v = call('HGET', x.hash, x.id)
  local c = v and string.sub(v, 1, 1)
  if c == 'x' or c == 's' or c == 'e' then
    local until_ms = call('ZSCORE', x.done, x.id)
    if not until_ms or tonumber(until_ms) <= now then c = nil end
  end
  if c == 'r' or c == 'e' then
    -- An open one past its ttl that no purge reached yet (a peek) is settled as the ended one it is.
    local est, t = string.match(v, '^[re] (%d+) (%d+)$')
    if not est then error({ err = 'WRONGTYPE reservation value is not one' }) end
    x.kind, x.est, x.at, x.was_expired = 'settle', tonumber(est), tonumber(t), c == 'e'
  elseif c == 'x' or c == 's' then
    x.kind = 'late'
  elseif x.settles then
    x.kind = 'unreserved'
  elseif call('ZCARD', x.exp) >= MAX_RESERVATIONS_PER_COUNTER then
    x.kind = 'full'
  else
    x.kind = 'reserve'
  end
  return expired
end

-- In-flight slots: slot_window, slot_write.
--#include slots.lua

-- Spend lists: note_spend.
--#include spend-top.lua

-- Window j of a request with a charge: its kind (normal, charge, or its reservation's), its count before (a
-- bucket: its debt), the previous window's, what it asks and whether that takes it past what it holds.
local function charge_window(j, rsv)
  local w = shape_of[j]
  if w.kind.slots then return slot_window(w, slots_of[j], rsv.count_it, rsv.pending) end
  local x = rsv.by_group[group_of[j]]
  local kind = 'normal'
  if w.hits < 0 then
    kind = 'refund'
  elseif x then
    kind = x.kind
    if x.hits == nil then x.hits = w.hits end
  elseif w.charge and w.hits > 0 then
    kind = 'charge'
  end
  local curr, prev, used = w.kind.read(j, w)
  local ask = w.hits
  if kind == 'settle' then
    -- Given back only in the window that holds the estimate; a later one takes only what exceeds it.
    ask = w.hits - x.est
    if not w.kind.refills and ask < 0 and bounds(w.window, w.calendar, x.at) ~= w.index then ask = 0 end
  elseif kind == 'late' then
    ask = 0
  elseif kind == 'refund' then
    -- Given back whatever the answer and never over: at most what the window (a bucket: its debt, in whole
    -- requests rounded up) holds, so a count never goes below 0.
    local holds = math.ceil(curr / w.step)
    if -w.hits < holds then holds = -w.hits end
    return kind, curr, prev, -holds, false
  end
  local q = ask
  if kind ~= 'charge' and kind ~= 'settle' and kind ~= 'unreserved' then q = max(ask, 1) end
  if kind == 'full' then return kind, curr, prev, ask, true end
  return kind, curr, prev, ask, used + q * w.step > w.cap
end

-- What becomes of each reservation once the request is decided: made (open), refused (remembered so its
-- settlement counts nothing), settled and unreserved (remembered as settled, so a replay counts once), or
-- late and full (nothing written).
local function record_reservations(rsv, admitted, count_it)
  for _, x in ipairs(rsv.list) do
    local room = admitted == 1 and not group_over[x.group]
    x.out = 0
    if x.kind == 'reserve' and room then
      x.event, x.out = 'made', x.hits
      if count_it then
        call('ZREM', x.done, x.id)
        call('HSET', x.hash, x.id, string.format('r %.0f %.0f', x.hits, now))
        call('ZADD', x.exp, now + x.ttl, x.id)
      end
    elseif x.kind == 'reserve' or x.kind == 'settle' or x.kind == 'unreserved' then
      x.event = x.kind == 'reserve' and 'refused' or x.kind == 'settle' and 'settled' or 'unreserved'
      if x.kind == 'settle' then x.out = x.est end
      if count_it then end_record(x, x.id, x.kind == 'reserve' and 'x' or 's', now + x.ttl) end
    else
      x.event = x.kind == 'full' and 'full' or 'late'
    end
    if count_it and x.event ~= 'full' and x.event ~= 'late' then keep(x) end
  end
end

-- The request's answer: as decide's, then per window what it counted, per reservation its event and estimate,
-- and how many expired unsettled.
local EVENTS = { made = 1, refused = 2, settled = 3, late = 4, full = 5, unreserved = 6 }
local function answer_charges(admitted, n, k0, curr, prev, over, counted, rsv, expired)
  o = o + 1
  out[o] = admitted
  answer_windows(n, k0, curr, prev, over)
  for i = 1, n do
    o = o + 1
    out[o] = counted[i]
  end
  for _, x in ipairs(rsv.list) do
    out[o + 1], out[o + 2] = EVENTS[x.event], x.out
    o = o + 2
  end
  o = o + 1
  out[o] = expired
  -- Per in-flight check, in order: the slots whose lease it found ended.
  for i = 1, n do
    local x = slots_of[k0 + i]
    if x then
      o = o + 1
      out[o] = x.expired
    end
  end
end

-- A charge or settlement is counted whatever the answer; anything else as decide counts it (admitted, with
-- room); the admission rule is decide's.
local function decide_charges(count_it, n, k0, rsv, spend, usage)
  rsv.count_it, rsv.pending = count_it, {}
  local ledger_of = {}
  if count_it then ledger_of = usage_reachable(usage, k0) end
  local expired = 0
  for _, x in ipairs(rsv.list) do expired = expired + look_up(x, count_it, ledger_of[x.group]) end
  local curr, prev, over, asks, kinds = {}, {}, {}, {}, {}
  for g in pairs(group_over) do group_over[g] = nil end
  for g in pairs(quota_group) do quota_group[g] = nil end
  local quota_groups, quota_over, admitted = 0, 0, 1
  for i = 1, n do
    local w, group = shape_of[k0 + i], group_of[k0 + i]
    kinds[i], curr[i], prev[i], asks[i], over[i] = charge_window(k0 + i, rsv)
    if w.quota and not quota_group[group] then
      quota_group[group] = true
      quota_groups = quota_groups + 1
    end
    if over[i] then
      if w.quota and not w.shadow and not group_over[group] then quota_over = quota_over + 1 end
      group_over[group] = true
      if not w.shadow and not w.quota then admitted = 0 end
    end
  end
  if quota_groups > 0 and quota_over == quota_groups then admitted = 0 end
  local counted = {}
  for i = 1, n do
    local kind, c = kinds[i], 0
    if kind == 'charge' or kind == 'settle' or kind == 'unreserved' or kind == 'refund' or kind == 'return' then
      c = asks[i]
    elseif (kind == 'normal' or kind == 'reserve' or kind == 'take') and admitted == 1 and not group_over[group_of[k0 + i]] then
      c = shape_of[k0 + i].hits
    end
    counted[i] = c
    if count_it and c ~= 0 then
      if shape_of[k0 + i].kind.slots then
        slot_write(shape_of[k0 + i], slots_of[k0 + i], c)
      else
        local w = shape_of[k0 + i]
        w.kind.add(k0 + i, w, curr[i], c, true)
      end
    end
  end
  record_reservations(rsv, admitted, count_it)
  if count_it then
    usage_events(usage, n, k0, rsv, counted)
    for _, t in ipairs(spend) do
      if counted[t.i] ~= 0 then note_spend(k0 + t.i, t.list, t.member) end
    end
  end
  answer_charges(admitted, n, k0, curr, prev, over, counted, rsv, expired)
end
