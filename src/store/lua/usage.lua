--[[
  Part of check-and-incr.lua, included where it says --#include usage.lua (in charges.lua): the usage ledger
  (src/store/usage-ledger.ts; stream keys in src/counters/keys.ts usageStreamKey). Uses the script's locals:
  call, now, shape_of, group_of.
]]

-- A request's ledger streams must be this node's before anything is written: one that is not (a Cluster
-- moving a slot) ends the request here, having written nothing, and it is sent again slot by slot. Returns each
-- descriptor's (group's) ledger.
local function usage_reachable(usage, k0)
  local of = {}
  for _, u in ipairs(usage) do
    local ok = redis.pcall('XLEN', u.stream)
    if type(ok) == 'table' and ok.err then error(ok) end
    of[group_of[k0 + u.i]] = u
  end
  return of
end

-- One event: what the charge did (at `at`, else now), appended to the stream (its oldest entries trimmed past
-- about maxlen).
local function usage_event(u, outcome, tokens, estimate, rid, at)
  call('XADD', u.stream, 'MAXLEN', '~', u.maxlen, '*', 't', string.format('%.0f', at or now), 'domain', u.domain, 'rule', u.rule,
    'window', u.window, 'counter', u.counter, 'outcome', outcome, 'tokens', string.format('%.0f', tokens),
    'estimate', string.format('%.0f', estimate), 'rid', rid, 'values', u.values)
end

-- The events of a decided request: per descriptor with a ledger, its settlement or unreserved charge, or its
-- plain charge or refund (src/store/usage-ledger.ts usageOutcomes, line for line): a settlement's tokens are what
-- the stream cost (but what an expired reservation's own event already said), a charge's what it counted, a
-- refund's the most any window gave back (negative). Expired reservations write theirs in purge.
local function usage_events(usage, n, k0, rsv, counted)
  for _, u in ipairs(usage) do
    local j = k0 + u.i
    local w, group = shape_of[j], group_of[j]
    local x = rsv.by_group[group]
    if x and x.kind == 'settle' then
      local adds = x.hits
      if x.was_expired then adds = x.hits - x.est end
      usage_event(u, 'settled', adds, x.est, x.id)
    elseif x and x.kind == 'unreserved' then
      usage_event(u, 'unreserved', x.hits, 0, x.id)
    elseif not x and w.hits < 0 then
      local back = 0
      for i = 1, n do
        if group_of[k0 + i] == group and counted[i] < back then back = counted[i] end
      end
      if back ~= 0 then usage_event(u, 'refunded', back, 0, '') end
    elseif not x and w.hits > 0 and counted[u.i] ~= 0 then
      usage_event(u, 'charged', counted[u.i], 0, '')
    end
  end
end
