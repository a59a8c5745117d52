--[[
  Part of check-and-incr.lua, included where it says --#include plain.lua: the usual request, whose windows
  are all plain (fixed windows, none shadow, quota or charge), decided without group bookkeeping. Uses the
  script's locals: shape_of, cur, values, out and o, count, key_error, find, call, max, now.
]]

-- Window i's answer in the reply at `head`: its count c before the request, or -(c + 1) when it has no room;
-- whether it has.
local function room(head, i, c, w)
  if c + max(w.hits, 1) > w.limit then
    out[head + i] = -c - 1
    return false
  end
  out[head + i] = c
  return true
end

-- A plain request that only checks (the peek of a request split over Cluster slots): admitted when every
-- window has room; nothing written. No group bookkeeping, no tables.
local function decide_peek(n, k0)
  local head = o + 1
  local admitted = 1
  for i = 1, n do
    local j = k0 + i
    if not room(head, i, count(cur[j]), shape_of[j]) then admitted = 0 end
  end
  out[head] = admitted
  o = head + n
end

-- Takes back what a counting request added to its first `upto` windows, last first (a window counted twice by
-- one request comes back one step at a time): DECRBY, or DEL for a counter that INCRBY created, so a refused
-- request leaves its counters as they were. `afters[i]` is window i's count after its INCRBY.
local afters = {}
local function take_back(k0, upto)
  for i = upto, 1, -1 do
    local j = k0 + i
    local w, n = shape_of[j], cur[j]
    if w.hits > 0 then
      if afters[i] == w.hits then
        redis.pcall('DEL', n)
        values[n] = false
      else
        redis.pcall('DECRBY', n, w.hits)
        values[n] = afters[i] - w.hits
      end
    end
  end
end

-- A plain request one of whose INCRBYs Redis refused (a key of another type, a value that is not a count, or
-- no writes at all: OOM, READONLY, MISCONF): what it added is taken back, and it is decided from reads, as a
-- script that reads first decides it. Refused, it needed no write, and is answered; admitted, it fails with
-- Redis's error (a value that is not a count: count() raises WRONGTYPE). A key its Cluster node does not serve
-- (NOTLOCAL) is not read: the batch ends there.
local function by_reads(n, k0, upto, e)
  take_back(k0, upto)
  local err = key_error(e)
  if find(err.err or '', 'NOTLOCAL', 1, true) then error(err) end
  decide_peek(n, k0)
  if out[o - n] == 1 then error(err) end
end

-- The usual request that counts (every window plain): each window's INCRBY first, its count before this
-- request read from the reply, less what this request added to the same counter before it; when a window has
-- no room, every increment is taken back. It answers, and leaves in Redis, what reading every window and then
-- counting each would, in one call a window where that took two (a share of the MGET, and INCRBY); windows
-- that only check (hits 0) are read first. (A refused request now writes and takes back: replicas and the AOF
-- see both; docs/redis.md.)
local function decide_counting(n, k0)
  local head = o + 1
  local admitted = 1
  for i = 1, n do
    local j = k0 + i
    if shape_of[j].hits == 0 then out[head + i] = count(cur[j]) end
  end
  for i = 1, n do
    local j = k0 + i
    local w, name = shape_of[j], cur[j]
    local c = out[head + i]
    if w.hits > 0 then
      local after = redis.pcall('INCRBY', name, w.hits)
      if type(after) == 'table' then return by_reads(n, k0, i - 1, after) end
      afters[i] = after
      c = after - w.hits
      for x = 1, i - 1 do
        if cur[k0 + x] == name then c = c - shape_of[k0 + x].hits end
      end
    end
    if not room(head, i, c, w) then admitted = 0 end
  end
  out[head] = admitted
  o = head + n
  if admitted == 0 then
    take_back(k0, n)
    return
  end
  for i = 1, n do
    local j = k0 + i
    local w = shape_of[j]
    if w.hits > 0 then
      values[cur[j]] = afters[i]
      if afters[i] == w.hits then call('PEXPIRE', cur[j], w.ends - now + 1000) end
    end
  end
end
