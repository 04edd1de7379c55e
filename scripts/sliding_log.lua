-- SlidingLog checks and charges a sliding-log limit: a request is allowed
-- iff the cost admitted in (now - period, now] plus its own cost is at most
-- limit. Every admitted request is logged with its time and cost, so the
-- window is exact at µs resolution.
--
-- remaining is the largest cost admitted right after this decision;
-- retry_after is 0 when allowed, -1 when cost > limit, else the exact time
-- until enough logged cost has left the window; reset_after is the time
-- until the log is empty. A denied request, a cost of 0 and a peek change nothing.
-- Times are in µs. Memory is bounded by the requests admitted in the last
-- period, whatever their cost; a call makes O(log n) Redis calls for n
-- logged requests.
--
-- When the limit changes, the logged cost is held against the new limit.
-- When the period changes, the window takes its new length at once, over
-- the members the log still holds (an admission removes those at or before
-- now - period, with its own period); but the log is forgotten once its
-- newest member has left the window of the period it was admitted under
-- (its TTL ends then), unless an admission under the new period comes
-- first (docs/algorithms.md, "When a limit changes").
--
-- @script sliding_log
-- @key log            sorted set: one member per admitted request, scored by its time in µs
-- @arg limit int      units admitted per period, >= 1
-- @arg period int     window length in µs, >= 1
-- @arg cost int       units this request takes, >= 0 (0 only reports)
-- @arg now int?       client clock in µs since the Unix epoch; Redis TIME when unset
-- @arg peek bool?     decide as for cost and reply as if charged, but write nothing (Limiter.Peek)
-- @return allowed bool
-- @return remaining int     largest cost admitted right after this decision
-- @return retry_after int   µs until the same cost is admitted; 0 if allowed, -1 if it never fits
-- @return reset_after int   µs until the log is empty

-- State: an admitted request of cost c > 0 adds one member
-- "<total>:<c>:<period>" scored by its time, where total is the running
-- total of the cost logged so far, itself included, zero-padded to 16
-- digits, and period the window length it was admitted under (members of
-- earlier versions, "<total>:<c>", read as admitted under the caller's). Totals grow with every
-- member, so members are unique even when requests share a timestamp, and
-- the log's order (by score, then by name) is the order of the totals. The
-- cost in the log from a member m to the newest is newest.total -
-- (m.total - m.cost): two reads give the cost in the window. Members at or
-- before now - period are removed when a request is admitted; a denied
-- request only reads.
--
-- Time order: a request whose now is before the newest member's time (a
-- client clock behind another's) is logged at the newest member's time, so
-- the order of times stays the order of totals. It counted against every
-- member after now - period anyway; logged later, it leaves the window
-- later, which can only make later decisions stricter.
--
-- Totals restart at 0 whenever the log empties. A log that stays busy long
-- enough for its total to pass 2^53 (the last exact Lua integer) is
-- renumbered: the cost that left the window is subtracted from every member.
-- Every total is at most limit <= 2^52 after a renumbering, so the next one
-- comes only when all these members have left the window: no member is
-- renumbered twice.
--
-- Memory: at most one member per request admitted in the last period, and
-- never more than limit members (each holds a cost >= 1 and the log holds at
-- most limit after a write); about 60 bytes each. TTL: until the newest
-- member leaves the window, rounded up to whole ms and at least 2 ms.
--
-- Work per call, for n members: an admission makes a constant number of
-- O(log n) calls (ZREMRANGEBYSCORE also removes the expired members, each
-- once); a denial reads the first member counted and the newest, and only
-- when the first one's leaving does not let the cost in, finds the member
-- whose leaving does by a binary search over ranks, O(log n) calls of
-- ZRANGE by rank, O(log^2 n) time in Redis. A renumbering rewrites the log
-- once, O(n log n).

-- Repair: a key found without TTL (PTTL -1) gets its TTL back on any call;
-- that is the only write a denied request or a cost of 0 can make.

local MAX = 4503599627370496 -- 2^52: integers up to here are exact in Lua numbers
local MAX_PERIOD = 1125899906842624 -- 2^50 µs, about 35 years
local floor, find, format, tonumber = math.floor, string.find, string.format, tonumber

-- lib returns the helpers every script carries, the same text in each.
-- Calling it makes their closures, which costs more than a decision's own
-- arithmetic, so the scripts call it only off their fast path (to name a
-- bad argument, to repair a TTL). Of the script's locals it reads only
-- tonumber, so that defining it costs one closure and one upvalue.
local function lib()
  local h = {}

  function h.fmt(x)
    return string.format('%d', x)
  end

  function h.bad(msg)
    return redis.error_reply('ERR sluice: sliding_log: ' .. msg)
  end

  -- int_arg returns ARGV[i] as an integer in [lo, hi]; nil, nil when it is
  -- unset and optional; nil and a message when it is malformed.
  function h.int_arg(i, name, lo, hi, optional)
    local s = ARGV[i]
    if s == nil or s == '' then
      if optional then
        return nil, nil
      end
      return nil, name .. ' is required'
    end
    local v = string.find(s, '^%d+$') and tonumber(s)
    if not v or (#s > 16 and v > hi) then -- past 16 digits only leading zeros keep a value exact
      return nil, name .. ' must be a non-negative decimal integer, got "' .. string.sub(s, 1, 24) .. '"'
    end
    if v < lo or v > hi then
      return nil, name .. ' must be between ' .. h.fmt(lo) .. ' and ' .. h.fmt(hi) .. ', got ' .. s
    end
    return v, nil
  end

  -- divmod returns floor(a / b) and a - floor(a / b) * b, exactly, for
  -- integers |a| < 2^53 and b > 0.
  function h.divmod(a, b)
    local q = math.floor(a / b)
    local r = a - q * b
    if r < 0 then
      q, r = q - 1, r + b
    elseif r >= b then
      q, r = q + 1, r - b
    end
    return q, r
  end

  function h.ceildiv(a, b)
    local q, r = h.divmod(a, b)
    if r > 0 then
      q = q + 1
    end
    return q
  end

  -- gcd returns the greatest common divisor of positive integers a and b.
  function h.gcd(a, b)
    while b > 0 do
      local _, r = h.divmod(a, b)
      a, b = b, r
    end
    return a
  end

  -- expire_in gives key a TTL of us rounded up to whole ms and at least 2
  -- ms, or deletes it when its useful life is over. Redis expires a key at a
  -- whole ms, so a TTL of 1 ms can end a few µs after it is set (Redis 7.0
  -- can even drop the key at once); 2 ms always outlive 1 ms.
  function h.expire_in(key, us)
    if us <= 0 then
      redis.call('DEL', key)
    else
      if us < 2000 then
        us = 2000
      end
      redis.call('PEXPIRE', key, h.fmt(h.ceildiv(us, 1000)))
    end
  end

  return h
end

-- Arguments: the usual ARGV (all five present, each empty or decimal
-- digits, every number in range) passes one check; anything else goes
-- through int_arg, which accepts the same values and names the first bad
-- one.
local limit, period, cost, now, peek
if #ARGV == 5 and find(table.concat(ARGV), '^%d+$') then
  limit, period, cost, now, peek = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
end
if not (limit and period and cost and limit >= 1 and limit <= MAX and period >= 1 and period <= MAX_PERIOD
    and cost <= MAX and (now and now <= MAX or ARGV[4] == '') and (peek == '' or peek == '0' or peek == '1')) then
  local h = lib()
  local err
  limit, err = h.int_arg(1, 'limit', 1, MAX)
  if err then return h.bad(err) end
  period, err = h.int_arg(2, 'period', 1, MAX_PERIOD)
  if err then return h.bad(err) end
  cost, err = h.int_arg(3, 'cost', 0, MAX)
  if err then return h.bad(err) end
  now, err = h.int_arg(4, 'now', 0, MAX, true)
  if err then return h.bad(err) end
  peek = ARGV[5]
  if peek ~= nil and peek ~= '' and peek ~= '0' and peek ~= '1' then
    return h.bad('peek must be 1, 0 or empty, got "' .. string.sub(peek, 1, 24) .. '"')
  end
end
peek = peek == '1'
if not now then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end

local key = KEYS[1]
local gone = format('%d', now - period) -- members scored at or before it are out of the window (now - period, now]
local TOTAL_MAX = 2 * MAX -- 2^53: running totals stay exact up to here

-- entry decodes the first member of a ZRANGE ... WITHSCORES reply: its time,
-- running total, cost and the period it was admitted under (the caller's
-- for a member of earlier versions, which wrote none); nil when the reply
-- is empty or the member is not of this script's format.
local function entry(e)
  if #e < 2 then
    return nil
  end
  local total, c, p = string.match(e[1], '^(%d+):(%d+):(%d+)$')
  if total == nil then
    total, c = string.match(e[1], '^(%d+):(%d+)$')
    p = period
  end
  if total == nil or #total ~= 16 then
    return nil
  end
  return tonumber(e[2]), tonumber(total), tonumber(c), tonumber(p)
end

local function name(total, c, p)
  return format('%016d:%d:%d', total, c, p)
end

local function foreign()
  return lib().bad('key ' .. key .. ' holds a member not written by this script')
end

-- used: the cost logged after now - period; base: the running total just
-- before the first member counted; newest: the time and total of the newest
-- member.
-- A log is forgotten once its newest member has left the window of the
-- period it was admitted under (its TTL ends then): after a longer period
-- it does not come back. cut is that moment while the log counts.
local used, base, newest_at, newest_total = 0, 0, nil, 0
local first_at, first_total, cut
local forgotten = false
local first = redis.call('ZRANGEBYSCORE', key, '(' .. gone, '+inf', 'WITHSCORES', 'LIMIT', '0', '1')
if #first > 0 then
  local first_cost, newest_cost, newest_p
  first_at, first_total, first_cost = entry(first)
  newest_at, newest_total, newest_cost, newest_p = entry(redis.call('ZRANGE', key, '-1', '-1', 'WITHSCORES'))
  if first_at == nil or newest_at == nil then return foreign() end
  cut = newest_at + newest_p
  if now >= cut then
    forgotten, cut, newest_at = true, nil, nil
  else
    base = first_total - first_cost
    used = newest_total - base
  end
end

local allowed, retry, wrote = 0, 0, false
if cost > limit then
  retry = -1
elseif used + cost <= limit or cost == 0 then
  allowed = 1
  if cost > 0 and peek then
    local at = now
    if newest_at ~= nil and newest_at > now then
      at = newest_at
    end
    newest_at, cut = at, nil
    used = used + cost
  elseif cost > 0 then
    if forgotten then
      redis.call('DEL', key)
    else
      redis.call('ZREMRANGEBYSCORE', key, '-inf', gone)
    end
    if used == 0 then
      newest_total = 0 -- the log is empty: totals restart
    elseif newest_total > TOTAL_MAX - cost then
      -- Renumber: subtract base from every total.
      local all = redis.call('ZRANGE', key, '0', '-1', 'WITHSCORES')
      redis.call('DEL', key)
      local i = 1
      while i <= #all do
        local batch = {}
        local last = i + 999
        if last > #all then
          last = #all
        end
        for j = i, last, 2 do
          local at, total, c, p = entry({all[j], all[j + 1]})
          if at == nil then return foreign() end
          batch[#batch + 1] = all[j + 1]
          batch[#batch + 1] = name(total - base, c, p)
        end
        redis.call('ZADD', key, unpack(batch))
        i = last + 1
      end
      newest_total = newest_total - base
    end
    local at = now
    if newest_at ~= nil and newest_at > now then
      at = newest_at -- keep times in the order of totals (see Time order)
    end
    newest_total = newest_total + cost
    redis.call('ZADD', key, format('%d', at), name(newest_total, cost, period))
    newest_at, cut = at, nil
    used = used + cost
    wrote = true
  end
else
  -- Members leave the window in rank order. The cost fits once the first
  -- member whose total reaches target has left, with every member before
  -- it: binary search over ranks, from the first member counted (rank lo)
  -- to the newest (rank hi, whose total is base + used >= target).
  local target = base + used + cost - limit
  local at = first_at
  if first_total < target then
    -- (Ranks are read only when the first member counted does not free
    -- enough: a request of cost 1 needs them only after the limit was
    -- lowered.)
    local lo = redis.call('ZCOUNT', key, '-inf', gone)
    local hi = redis.call('ZCARD', key) - 1
    at = newest_at
    while lo < hi do
      local mid = lo + floor((hi - lo) / 2)
      local m_at, m_total = entry(redis.call('ZRANGE', key, format('%d', mid), format('%d', mid), 'WITHSCORES'))
      if m_at == nil then return foreign() end
      if m_total >= target then
        hi, at = mid, m_at
      else
        lo = mid + 1
      end
    end
  end
  retry = at + period - now
  if cut and retry > cut - now then
    retry = cut - now
  end
end

local reset = 0
if used > 0 then
  reset = newest_at + period - now
  if cut and reset > cut - now then
    reset = cut - now
  end
end
if wrote then
  -- Until the newest member leaves the window, in whole ms, at least 2 ms.
  local ms = floor((reset + 999) / 1000)
  if ms < 2 then
    ms = 2
  end
  redis.call('PEXPIRE', key, format('%d', ms))
elseif not peek and redis.call('PTTL', key) == -1 then
  lib().expire_in(key, reset) -- repair a key found without TTL
end
local remaining = limit - used
if remaining < 0 then
  remaining = 0
end
return {allowed, remaining, retry, reset}