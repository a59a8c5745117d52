--[[
  Part of check-and-incr.lua, included where it says --#include usage.lua (in charges.lua): the usage ledger
  (src/store/usage-ledger.ts; stream keys in src/counters/keys.ts usageStreamKey). Uses the script's locals:
  call, now, shape_of, group_of.
]]

-- A request's ledger streams must be this node's before anything is written: one that is not (a Cluster
-- moving a slot) ends the request here, having written nothing, and it is sent again slot by slot.
local function usage_reachable(usage)
  for _, u in ipairs(usage) do
    local ok = redis.pcall('XLEN', u.stream)
    if type(ok) == 'table' and ok.err then error(ok) end
  end
end

-- One event: what the charge did (at `at`, else now), appended to the stream (its oldest entries trimmed past
-- about maxlen).
local function usage_event(u, outcome, tokens, estimate, rid, at)
  call('XADD', u.stream, 'MAXLEN', '~', u.maxlen, '*', 't', string.format('%.0f', at or now), 'domain', u.domain, 'rule', u.rule,
    'window', u.window, 'counter', u.counter, 'outcome', outcome, 'tokens', string.format('%.0f', tokens),
    'estimate', string.format('%.0f', estimate), 'rid', rid, 'values', u.values)
end

-- The events of a decided request: per descriptor with a ledger, its settlement or unreserved charge, its
-- plain charge or its refund, and the reservations of its counter found expired: each event's tokens are what
-- it adds to the counter's spend (src/store/usage-ledger.ts usageOutcomes, line for line).
-- A reservation made, refused, late or full is no event: nothing was spent yet, or it was already.
local function usage_events(usage, k0, rsv, counted)
  for _, u in ipairs(usage) do
    local j = k0 + u.i
    local w, x = shape_of[j], rsv.by_group[group_of[j]]
    if x then
      for _, e in ipairs(x.expired_ids or {}) do usage_event(u, 'expired', e[2], e[2], e[1], e[3]) end
    end
    if x and x.kind == 'settle' then
      -- What it adds: a reservation that expired was charged at its estimate by its own event.
      local adds = x.hits
      if x.was_expired then adds = x.hits - x.est end
      usage_event(u, 'settled', adds, x.est, x.id)
    elseif x and x.kind == 'unreserved' then
      usage_event(u, 'unreserved', x.hits, 0, x.id)
    elseif not x and w.hits < 0 and counted[u.i] ~= 0 then
      usage_event(u, 'refunded', counted[u.i], 0, '')
    elseif not x and w.hits > 0 and counted[u.i] ~= 0 then
      usage_event(u, 'charged', counted[u.i], 0, '')
    end
  end
end
