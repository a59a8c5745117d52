--[[
  check-and-incr (layout v2): decides a batch of requests, one after another; each request's windows are
  checked, and counted only if that request is admitted. Requests in a batch are independent: one's rejection
  never affects another's, except that a later request sees what an earlier one counted (as if sent one by
  one). Atomic, so replicas sharing this Redis can never admit more than a limit together.
  Run by src/store/redis-store.ts with EVALSHA (EVAL when Redis has not cached it yet).

  Cost: a plain request that counts (plain.lua) reads nothing up front: each window is one INCRBY, whose reply
  is its count, plus a PEXPIRE when it created the counter; if a window has no room, each is taken back (a
  DECRBY, or a DEL of a counter it created), so a refused request leaves its counters as they were. One MGET
  reads the counters of every other request of the batch; an admitted window is an INCRBY (and PEXPIRE) after
  it, a bucket one SET with its expiry. A check-only request writes nothing; a refused one leaves nothing
  changed (a plain one wrote and took back), but its charges (charge_mode: an INCRBY and a PEXPIRE each) and its
  reservation's record (an HSET, a ZADD and two PEXPIREs): what a request with a charge window costs more is
  paid by it alone.

  KEYS     the base of every window of every request, in order (a base may appear more than once); the
           counters are plain strings named from it:
             <base>:<i>   a window's count, where i = floor(start / window_ms) is the window's index since the
                          epoch (a sliding window also reads <base>:<i-1>, the window before). Same hash tag as
                          the base, so the same Redis Cluster slot.
             <base>       a token bucket: "<w> <c>", when it was last written (ms) and its debt then, in ticks
                          of 1/limit ms (src/counters/bucket.ts)
  ARGV[1]  now in ms, or "0" to use Redis's clock (TIME), which every replica then shares
  ARGV[2]  s, the number of window shapes; then s shapes of ten values each (a batch's windows mostly
           share a few, so each is sent once):
                  window_ms, limit, hits (0 or more), kind (its code: its place in src/limits/kinds/index.ts,
                  KINDS below), shadow (0|1), burst (0 unless a bucket), quota (0|1), charge (0|1), calendar
                  (0 = epoch-aligned, -1 weeks from Monday, n > 0 windows of n UTC calendar months:
                  src/counters/calendar.ts), op (the check's op, src/limits/check.ts: check, count, refund,
                  take or giveBack; a refund and a give-back come with charge 1, give their hits back and are
                  never refused: inside the script, negative hits and shadow)
  then, per request:
           mode   "count", or "peek" to decide without writing anything (the first phase of a request whose
                  counters live in several Redis Cluster slots); "c" and "p" are the same for a plain request
                  (every window a fixed window, none shadow, quota or charge), which sends no groups
           n      number of windows of this request (its keys are the next n of KEYS)
           then per window, two values: its shape (1-based), and its group (descriptor index); one value,
           its shape, for a plain request
           r      (not for a plain request) number of reservations, then per reservation four values: its
                  group, the request id's fingerprint, its ttl in ms, and 1 when it is a settlement (the rule's
                  settlement_key) else 0; its three keys follow the request's window keys in KEYS:
                  <counter key>:rsv, a hash (id -> "r <estimate> <ms reserved>" open, "e ..." ended unsettled,
                  "x" refused, "s" settled), <counter key>:rsv.exp, a sorted set (open ids by expiry ms), and
                  <counter key>:rsv.done, a sorted set (ended ids by when they are forgotten)
           f      (not plain) number of in-flight checks (slots.lua: the window's key is its set of holders),
                  then per one its window's place in the request (1-based) and its id's fingerprint ('' none);
                  their holders' hashes (<set>:h, src/counters/keys.ts slotHolders) follow the reservation keys in
                  KEYS, one each, in the same order
           t      (not plain) number of spend lists (src/store/spend-top.ts: windows of a charge_mode rule,
                  not shadow, not slots), then per one its window's place in the request (1-based) and the
                  counter's tag (what the list names it by); each list's key (src/counters/keys.ts
                  spendTopKey, without the window's index, which the script adds) follows the holders' hashes
                  in KEYS, one each, in the same order. A counter is listed after a charge that counted
                  something (spend-top.lua)
           u      (not plain) number of ledger streams (usage.lua), then per one seven values: its descriptor's
                  first window's place (1-based), the stream's bound, domain, rule, window name, counter tag,
                  values (JSON); each stream's key follows the spend lists' keys in KEYS, in the same order

  Returns  { now_ms, then per request: admitted (0|1), then per window its count before this request (a
           bucket: its debt now), written -(count + 1) when the window has no room, and for a sliding window
           the previous window's count after it; a request with a charge window then has per window what it
           counted (a settlement's difference may be negative), per reservation its event (1 made, 2 refused,
           3 settled, 4 late, 5 full, 6 unreserved) and estimate, the reservations found expired unsettled, and
           per in-flight check the slots whose lease ended }. Counts are
           whole numbers, so the sign says "no room" without another value. A request whose counters Redis
           refused (a key of another type, or a value that is not a count: WRONGTYPE; out of memory: OOM) has,
           in place of all that, the error's first word as a string: it fails alone, the others of the batch are
           decided as usual. A plain request's writes are taken back; a value that is not a count is found
           before anything is written (is_count, counts.lua: only what INCRBY reads as an integer, never "1e1",
           "0x5", " 5", "5.0", "nan" or "-inf", which tonumber reads); a write Redis refuses after another write
           of a request that is not plain leaves the first (over maxmemory Redis refuses every write, so in
           practice it is the first that fails). On a Cluster master (redis-script.ts), NOTLOCAL in its place
           ends the reply: that request and the rest were not decided.

  Rules (the same as src/limits/check.ts settle(), src/counters/window.ts and, for a request with a charge
  window, src/limits/charge-rules.ts decideCharges, as decide_charges below):
    used  = c                                  fixed window
    used  = p * (window - elapsed) / window + c  sliding window
    over  = used + max(hits, 1) > limit
    token bucket (GCRA), in ticks of 1/limit ms, where one request costs window ticks:
    debt  = max(0, c - (now - w) * limit)
    over  = debt + max(hits, 1) * window > burst * window
    counted: w = now, c = debt + hits * window, expiring when the debt is paid back, plus a second
    a group (descriptor) is over if any of its windows is; the request is admitted unless a group that is
    neither shadow nor quota is over, or the request has quota groups and all of them are over; then every
    window of every group that is not over is counted.
  A window's counter expires one second after the last window that can still read it (a sliding window's:
  the end of the next window).
]]

-- Globals as locals: a local is a register, a global a table lookup, and these run per window.
local tonumber, call, max = tonumber, redis.call, math.max
-- Where the keys are: KEYS (K[k_at + j] is KEYS[j]) and the arguments ARGV[1 .. last_arg]. The Cluster
-- variant (redis-script.ts) declares no keys and sends them in ARGV after the arguments: this line is its.
local K, k_at, last_arg = KEYS, 0, #ARGV

local now = tonumber(ARGV[1])
if now == 0 then
  local t = call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Calendar windows: month_of, month_start_day and bounds (src/counters/calendar.ts, line for line).
--#include calendar.lua

-- The kinds of limit, by code, and what the script asks each: KINDS.
--#include kinds.lua

-- The shapes, as numbers once, each table made whole at once (a field added later makes Lua grow it).
local shapes = {}
local s = tonumber(ARGV[2])
local format = string.format
for i = 1, s do
  local a = 2 + (i - 1) * 10
  local window, calendar, burst, limit = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 9]), tonumber(ARGV[a + 6]), tonumber(ARGV[a + 2])
  local kind, shadow, quota, charge = KINDS[tonumber(ARGV[a + 4])], ARGV[a + 5] == '1', ARGV[a + 7] == '1', ARGV[a + 8] == '1'
  local hits, op = tonumber(ARGV[a + 3]), ARGV[a + 10]
  if op == 'refund' or op == 'giveBack' then hits, shadow = -hits, true end
  local index, ends = bounds(window, calendar, now)
  local prev_suffix, keep, step, cap = nil, 0, 1, limit
  if kind.prev then prev_suffix, keep = ':' .. format('%.0f', index - 1), window end
  if kind.refills then step, cap = window, burst * window end
  shapes[i] = {
    window = window,
    limit = limit,
    hits = hits,
    kind = kind,
    shadow = shadow,
    burst = burst,
    quota = quota,
    charge = charge,
    calendar = calendar,
    index = index,
    ends = ends,
    keep = keep,
    step = step,
    cap = cap,
    suffix = ':' .. format('%.0f', index),
    prev_suffix = prev_suffix,
    plain = kind.plain and not (shadow or quota or charge),
  }
end

-- Pass 1: the name of every counter the batch reads up front (all but those of plain requests that count), and
-- one MGET of them all. `cur[j]` and `old[j]` name
-- window j's counter and (sliding) the previous window's. A name may be listed twice (two requests of one
-- client): MGET answers both, `values` keeps one. Per request r: its first window is r_k[r] + 1, it has r_n[r]
-- windows, r_count[r] says whether to count it, r_plain[r] whether every window is plain, r_short[r]
-- whether it came without groups.
local names, cur, old, shape_of, group_of, slots_of = {}, {}, {}, {}, {}, {}
local r_k, r_n, r_count, r_plain, r_short, r_charge, r_rsv, r_spend, r_usage = {}, {}, {}, {}, {}, {}, {}, {}, {}
local m, reqs = 0, 0

-- A request's reservations, in-flight checks and spend lists: read_tail.
--#include request-tail.lua
do
  local k, a, last = 0, 3 + s * 10, last_arg
  while a <= last do
    local mode = ARGV[a]
    local n = tonumber(ARGV[a + 1])
    local short = mode == 'c' or mode == 'p'
    local stride = short and 1 or 2
    local is_plain, has_charge = true, false
    for i = 1, n do
      local j = k + i
      local w = shapes[tonumber(ARGV[a + (i - 1) * stride + 2])]
      if not w.plain then is_plain = false end
      if w.charge then has_charge = true end
      shape_of[j] = w
      if not short then group_of[j] = ARGV[a + (i - 1) * 2 + 3] end
      local n1
      -- A bucket's counter and a set of slots are the base itself; a window's is named by its index.
      if w.kind.whole then n1 = K[k_at + j] else n1 = K[k_at + j] .. w.suffix end
      -- A plain request that counts reads nothing up front: its INCRBYs read (decide_counting). Slots are
      -- read by slots.lua.
      if mode ~= 'c' and not w.kind.slots then
        m = m + 1
        names[m] = n1
      end
      cur[j] = n1
      if w.kind.prev then
        local n0 = K[k_at + j] .. w.prev_suffix
        m = m + 1
        names[m] = n0
        old[j] = n0
      end
    end
    reqs = reqs + 1
    r_k[reqs], r_n[reqs], r_count[reqs], r_plain[reqs], r_short[reqs] = k, n, mode == 'count' or mode == 'c', is_plain, short
    r_charge[reqs] = has_charge
    k = k + n
    a = a + 2 + n * stride
    -- What a request that is not plain carries after its windows (request-tail.lua). (A plain one has none, and
    -- no tables made for it.)
    if not short then a, k = read_tail(a, k, reqs) end
  end
end
local values = {}
if m > 0 then
  local got = call('MGET', unpack(names))
  for i = 1, m do values[names[i]] = got[i] end
end

-- Reading counters: key_error, read, is_count, count.
--#include counts.lua

-- The algorithms: fixed_read and window_add, sliding_read, bucket_read and bucket_add.
--#include fixed.lua
--#include sliding.lua
--#include bucket.lua

-- Each kind's read (window j's count before the request, a bucket's debt; the previous window's, sliding only;
-- what a decision weighs) and add (d more to window j, read as curr; `always` sets a window's expiry even if it
-- existed). Slots have neither here: slots.lua reads and writes them, through charges.lua.
KINDS[0].read, KINDS[0].add = fixed_read, window_add
KINDS[1].read, KINDS[1].add = sliding_read, window_add
KINDS[2].read, KINDS[2].add = bucket_read, bucket_add

-- The reply, and how many values it holds (`#out` is not used: a request writes its admitted flag last).
local out, o = { now }, 1

-- Writes windows k0 + 1 .. k0 + n into the reply: each one's count before the request, as -(count + 1) when it
-- has no room, and the previous window's count for a kind whose reply holds it (redis-batch.ts reads it so).
local function answer_windows(n, k0, curr, prev, over)
  for i = 1, n do
    o = o + 1
    if over[i] then out[o] = -curr[i] - 1 else out[o] = curr[i] end
    if shape_of[k0 + i].kind.prev then
      o = o + 1
      out[o] = prev[i]
    end
  end
end

-- Decides one request whose windows are KEYS[k0 + 1 .. k0 + n]. Answers per window its count before the
-- request, as -(count + 1) when the window has no room, and for a sliding window the previous window's count.
local group_over, quota_group = {}, {}
local function decide(count_it, n, k0)
  local curr, prev, over = {}, {}, {}
  for g in pairs(group_over) do group_over[g] = nil end
  for g in pairs(quota_group) do quota_group[g] = nil end
  local quota_groups, quota_over = 0, 0
  local admitted = 1
  for i = 1, n do
    local w = shape_of[k0 + i]
    local group = group_of[k0 + i]
    local used
    curr[i], prev[i], used = w.kind.read(k0 + i, w)
    local is_over = used + max(w.hits, 1) * w.step > w.cap
    if w.quota and not quota_group[group] then
      quota_group[group] = true
      quota_groups = quota_groups + 1
    end
    over[i] = is_over
    if is_over then
      if w.quota and not w.shadow and not group_over[group] then quota_over = quota_over + 1 end
      group_over[group] = true
      if not w.shadow and not w.quota then admitted = 0 end
    end
  end
  if quota_groups > 0 and quota_over == quota_groups then admitted = 0 end

  if admitted == 1 and count_it then
    for i = 1, n do
      local w = shape_of[k0 + i]
      if w.hits > 0 and not group_over[group_of[k0 + i]] then w.kind.add(k0 + i, w, curr[i], w.hits, false) end
    end
  end

  o = o + 1
  out[o] = admitted
  answer_windows(n, k0, curr, prev, over)
end

-- Plain requests (every window a fixed window, none shadow, quota or charge): decide_peek, decide_counting.
--#include plain.lua

-- Requests with a charge window: decide_charges (src/limits/charge-rules.ts, line for line), its functions made
-- only for a batch that holds one (a closure made is a cost every call pays).
local function charge_rules()
--#include charges.lua
  return decide_charges
end
local decide_charges

-- Redis's refusals of a command inside a script while its Cluster fails over or moves a slot: "Script attempted
-- to execute a command while the cluster is down", "... to access a non local key ..." (cluster.c,
-- scriptVerifyClusterState), or a redirect's word. They say nothing of the request's keys.
local CLUSTER_WORDS = { 'Script attempted', 'CLUSTERDOWN', 'TRYAGAIN', 'MOVED', 'ASK ', 'NOTLOCAL' }

-- The error's code word (WRONGTYPE, OOM, ERR), from what pcall caught: a table on Redis 7, a string such as
-- "@user_script:1: -OOM command not allowed ..." before it. A Cluster's refusal is NOTLOCAL on a master's
-- call (the rest of the batch goes slot by slot) and MOVING on a slot's (the request is sent again a little
-- later): never a refusal of the keys, which would fail the request alone and lose a give-back
-- (redis-store.ts). It ran its reads first, so it wrote nothing but leases found ended.
local function kind(err)
  local text = type(err) == 'table' and (err.err or '') or tostring(err)
  for _, w in ipairs(CLUSTER_WORDS) do
    if string.find(text, w, 1, true) then return on_node and 'NOTLOCAL' or 'MOVING' end
  end
  return string.match(text, '(%u%u+)') or 'ERR'
end

-- Pass 2: the requests, one after another.
for r = 1, reqs do
  local at = o
  local ok, err
  if r_plain[r] and r_count[r] then
    ok, err = pcall(decide_counting, r_n[r], r_k[r])
  elseif r_plain[r] then
    ok, err = pcall(decide_peek, r_n[r], r_k[r])
  elseif r_short[r] then
    ok, err = false, { err = 'ERR a short request must hold only plain windows' }
  elseif r_charge[r] then
    decide_charges = decide_charges or charge_rules()
    ok, err = pcall(decide_charges, r_count[r], r_n[r], r_k[r], r_rsv[r], r_spend[r], r_usage[r])
  else
    ok, err = pcall(decide, r_count[r], r_n[r], r_k[r])
  end
  if not ok then
    -- Whatever the request wrote into the reply (its flag, up to two values a window and, with a charge,
    -- what follows them) goes.
    for i = at + 1, max(o, at + 1 + 2 * r_n[r]) do out[i] = nil end
    o = at + 1
    out[o] = kind(err)
    -- A key this node does not serve: this request wrote nothing (decide_counting took back its own), and the
    -- rest are not decided here; the caller sends them again slot by slot.
    if out[o] == 'NOTLOCAL' then break end
  end
end
return out
