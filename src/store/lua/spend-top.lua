--[[
  Part of check-and-incr.lua, included where it says --#include spend-top.lua (in charges.lua): a charge_mode
  rule's spend lists (src/store/spend-top.ts, keys in src/counters/keys.ts spendTopKey). Uses the script's
  locals: call, now, shape_of.
]]

-- Counters a list keeps, at most: src/store/spend-top.ts MAX_SPEND_LISTED.
local MAX_TOP = 1000

-- After window j's charge: its counter's share of what it holds (used / cap, as the kind's share() says), in the
-- list of the window it fell in (a bucket's has no index). Past the bound, the least full goes (the counter
-- itself if it is least). A list on a slot this node no longer serves (a Cluster moving slots) is skipped, and
-- the counter is listed again by its next charge: the charge stands either way.
local function note_spend(j, list, member)
  local w = shape_of[j]
  if w.cap <= 0 then return end
  local _, _, used = w.kind.read(j, w)
  local name, keep = list, w.ends + w.keep - now + 1000
  if w.kind.refills then
    keep = math.ceil(w.cap / w.limit) + 1000
  else
    name = list .. w.suffix
  end
  local added = redis.pcall('ZADD', name, used / w.cap, member)
  if type(added) == 'table' and added.err then return end
  if call('ZCARD', name) > MAX_TOP then call('ZPOPMIN', name) end
  if call('PTTL', name) < keep then call('PEXPIRE', name, keep) end
end
