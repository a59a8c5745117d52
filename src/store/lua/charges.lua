--[[
  Part of check-and-incr.lua, included where it says --#include charges.lua (src/store/redis-store.ts
  assembles the script): a request with a charge window (charge_mode), decided as src/store/charge-rules.ts
  decideCharges. It uses the script's locals: call, max, now, cur, values, shape_of, group_of, count, counts,
  bucket, bounds, out, o, group_over, quota_group.
]]

-- Adds d (a charge, or a settlement's difference, which may be negative) to a window or bucket, keeping it at
-- 0 or more, and (re)sets its expiry: a charge writes whether or not the counter existed.
local function write_delta(j, w, curr, d)
  local n = cur[j]
  if w.burst > 0 then
    local after = max(0, curr + d * w.window)
    local full = w.window
    if w.limit > 0 then full = math.ceil(after / w.limit) end
    local v = string.format('%.0f %.0f', now, after)
    call('SET', n, v, 'PX', full + 1000)
    values[n] = v
    return
  end
  local after = call('INCRBY', n, d)
  if after < 0 then after = call('INCRBY', n, -after) end
  values[n] = after
  local ends = w.ends
  if w.sliding then ends = ends + w.window end
  call('PEXPIRE', n, ends - now + 1000)
end

-- A reservation's record: what src/store/memory-reservations.ts keeps, with the same bound per counter.
local MAX_RESERVATIONS_PER_COUNTER = 10000
-- Forgets at most PURGE expired records a call, so a call's work stays bounded whatever expired at once.
local PURGE = 100

-- Reads reservation x's record into x.kind (reserve, settle, late or full; x.est and x.at for settle), after
-- forgetting what has expired (count_it only); returns how many of those were unsettled.
local function look_up(x, count_it)
  local expired = 0
  local gone = call('ZRANGEBYSCORE', x.exp, '-inf', now, 'LIMIT', 0, PURGE)
  for _, id in ipairs(gone) do
    local v = call('HGET', x.hash, id)
    if v and string.sub(v, 1, 1) == 'r' then expired = expired + 1 end
    if count_it then
      call('HDEL', x.hash, id)
      call('ZREM', x.exp, id)
    end
  end
  local v = call('HGET', x.hash, x.id)
  local at = v and call('ZSCORE', x.exp, x.id)
  if not v or not at or tonumber(at) <= now then
    if call('ZCARD', x.exp) >= MAX_RESERVATIONS_PER_COUNTER then x.kind = 'full' else x.kind = 'reserve' end
  elseif string.sub(v, 1, 1) == 'r' then
    local est, t = string.match(v, '^r (%d+) (%d+)$')
    if not est then error({ err = 'WRONGTYPE reservation value is not one' }) end
    x.kind, x.est, x.at = 'settle', tonumber(est), tonumber(t)
  else
    x.kind = 'late'
  end
  if count_it then return expired end
  return 0
end

local function remember(x, v)
  call('HSET', x.hash, x.id, v)
  call('ZADD', x.exp, now + x.ttl, x.id)
  call('PEXPIRE', x.hash, x.ttl + 1000)
  call('PEXPIRE', x.exp, x.ttl + 1000)
end

-- Window j of a request with a charge: its kind (normal, charge, or its reservation's), its count before (a
-- bucket: its debt), the previous window's, what it asks and whether that takes it past what it holds.
local function charge_window(j, rsv)
  local w = shape_of[j]
  local x = rsv.by_group[group_of[j]]
  local kind = 'normal'
  if x then
    kind = x.kind
    if x.hits == nil then x.hits = w.hits end
  elseif w.charge and w.hits > 0 then
    kind = 'charge'
  end
  local curr, prev, used = 0, 0, 0
  if w.burst > 0 then
    curr = bucket(j, w)
    used = curr
  else
    curr, prev = counts(j, w)
    used = curr
    if w.sliding then used = (prev * (w.window - (now % w.window))) / w.window + curr end
  end
  local ask = w.hits
  if kind == 'settle' then
    -- Given back only in the window that holds the estimate; a later one takes only what exceeds it.
    ask = w.hits - x.est
    if w.burst == 0 and ask < 0 and bounds(w.window, w.calendar, x.at) ~= w.index then ask = 0 end
  elseif kind == 'late' then
    ask = 0
  end
  local q = ask
  if kind ~= 'charge' and kind ~= 'settle' then q = max(ask, 1) end
  if kind == 'full' then return kind, curr, prev, ask, true end
  if w.burst > 0 then return kind, curr, prev, ask, used + q * w.window > w.burst * w.window end
  return kind, curr, prev, ask, used + q > w.limit
end

-- What becomes of each reservation once the request is decided: made, refused (remembered so its settlement
-- counts nothing), settled, or late and full (nothing written).
local function record_reservations(rsv, admitted, count_it)
  for _, x in ipairs(rsv.list) do
    local room = admitted == 1 and not group_over[x.group]
    x.out = 0
    if x.kind == 'reserve' and room then
      x.event, x.out = 'made', x.hits
      if count_it then remember(x, string.format('r %.0f %.0f', x.hits, now)) end
    elseif x.kind == 'reserve' then
      x.event = 'refused'
      if count_it then remember(x, 'x') end
    elseif x.kind == 'settle' then
      x.event, x.out = 'settled', x.est
      if count_it then call('HSET', x.hash, x.id, 's') end
    else
      x.event = x.kind == 'full' and 'full' or 'late'
    end
  end
end

-- The request's answer: as decide's, then per window what it counted, per reservation its event and estimate,
-- and how many expired unsettled.
local EVENTS = { made = 1, refused = 2, settled = 3, late = 4, full = 5 }
local function answer_charges(admitted, n, k0, curr, prev, over, counted, rsv, expired)
  o = o + 1
  out[o] = admitted
  for i = 1, n do
    o = o + 1
    if over[i] then out[o] = -curr[i] - 1 else out[o] = curr[i] end
    local w = shape_of[k0 + i]
    if w.sliding and w.burst == 0 then
      o = o + 1
      out[o] = prev[i]
    end
  end
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
end

-- A charge or settlement is counted whatever the answer; anything else as decide counts it (admitted, with
-- room); the admission rule is decide's.
local function decide_charges(count_it, n, k0, rsv)
  local expired = 0
  for _, x in ipairs(rsv.list) do expired = expired + look_up(x, count_it) end
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
    if kind == 'charge' or kind == 'settle' then
      c = asks[i]
    elseif (kind == 'normal' or kind == 'reserve') and admitted == 1 and not group_over[group_of[k0 + i]] then
      c = shape_of[k0 + i].hits
    end
    counted[i] = c
    if count_it and c ~= 0 then write_delta(k0 + i, shape_of[k0 + i], curr[i], c) end
  end
  record_reservations(rsv, admitted, count_it)
  answer_charges(admitted, n, k0, curr, prev, over, counted, rsv, expired)
end
