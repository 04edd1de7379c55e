-- SlidingWindow checks and charges a sliding-window-counter limit: the
-- count of the previous epoch-aligned window is weighted by how much of it
-- still overlaps the sliding window. With e the time elapsed in the current
-- window [k*period, (k+1)*period), a request is allowed iff
-- prev*(period-e)/period + cur + cost <= limit, compared exactly in
-- integers as prev*(period-e) + (cur+cost)*period <= limit*period.
--
-- remaining is the largest cost admitted right after this decision;
-- retry_after is 0 when allowed, -1 when cost > limit, else the exact time
-- until the same cost is admitted; reset_after is the time until both
-- counts have left the window. A denied request, a cost of 0 and a peek
-- change nothing. Times are in µs; limit*period must not exceed 2^52.
--
-- When the limit changes, the estimate is held against the new limit. When
-- the period changes, the two counts are added up and stand at the time of
-- the last admission on the new windows (counted fully in the new window
-- holding it, weighted in the next), at most until the newer of them would
-- have left the sliding window under the old period; the next admission
-- writes them into the new windows (docs/algorithms.md, "When a limit
-- changes").
--
-- @script sliding_window
-- @key state          string "t:c:p:d": the count c of the window of length d µs holding t (the last admission) and the count p of the window before
-- @arg limit int      units admitted per period, >= 1
-- @arg period int     window length in µs, >= 1
-- @arg cost int       units this request takes, >= 0 (0 only reports)
-- @arg now int?       client clock in µs since the Unix epoch; Redis TIME when unset
-- @arg peek bool?     decide as for cost and reply as if charged, but write nothing (Limiter.Peek)
-- @return allowed bool
-- @return remaining int     largest cost admitted right after this decision
-- @return retry_after int   µs until the same cost is admitted; 0 if allowed, -1 if it never fits
-- @return reset_after int   µs until both counts have left the window

-- State: the time of the last admission and the window length are stored
-- with the counts, so a stale key is read as empty whatever its TTL. A
-- window ahead of the caller's clock (another client's clock runs ahead) is
-- used as if the caller were at that window's start: the estimate then
-- weighs the previous window fully, which never admits more. TTL: until the
-- current window's count has left the sliding window, that is the end of
-- the next window, rounded up to whole ms and at least 2 ms, written with
-- the value by SET ... PX; counts of another period are never read past
-- that. Counts of another period can exceed the limit: no product past
-- 2^52 is formed with them. Memory: one string of at most 67 bytes per
-- identity (about 32 for a window of a minute).

-- Cost per decision: GET, then SET ... PX when a request is counted, else
-- PTTL when the key exists (TIME first when now is unset); the arguments
-- are checked at once in the usual case.

-- Repair: a key can lose its TTL only by a command from outside (PERSIST,
-- a SET without PX); one found without TTL (PTTL -1) gets it back on any
-- call but a peek, and that is the only write a denied request or a cost
-- of 0 can make. An admission writes the TTL with the value anyway.

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
    return redis.error_reply('ERR sluice: sliding_window: ' .. msg)
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
  if limit * period > MAX then
    return h.bad('limit*period must not exceed ' .. h.fmt(MAX))
  end
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
local lp = limit * period
if lp > MAX then
  local h = lib()
  return h.bad('limit*period must not exceed ' .. h.fmt(MAX))
end
if not now then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end

-- State: "t:c:p:d": the count c of the window of length d holding t, and
-- the count p of the window before it, where t is the time of the last
-- admission (or the start of its window, when that was ahead of the
-- caller's clock) and d the window length they were counted under. A
-- missing key reads as no counts; so does a value of another form or a key
-- of another type (such as the hash earlier versions kept), which the next
-- admission replaces. "w:c:p", which earlier versions wrote (the window
-- index w), reads as counted under the caller's period.
local key = KEYS[1]
local v = redis.pcall('GET', key)
local found = type(v) == 'string'
local win = floor(now / period)
local at = now -- the time the decision is made at (later than now only when the state is ahead)
local cur, prev = 0, 0
local cut = nil -- for counts of another period: when they end at the latest
if found then
  local st, sc, sp, sd = string.match(v, '^(%d+):(%d+):(%d+):(%d+)$')
  st, sc, sp, sd = tonumber(st), tonumber(sc), tonumber(sp), tonumber(sd)
  if not st then
    st, sc, sp = string.match(v, '^(%d+):(%d+):(%d+)$')
    st, sc, sp, sd = tonumber(st), tonumber(sc), tonumber(sp), period
    if st then
      st = st * period
    end
  end
  if st and sc and sp and st <= 2 * MAX and sc <= MAX and sp <= MAX and sd >= 1 and sd <= MAX_PERIOD then
    if sd ~= period then
      -- Counted under another period: both counts, added up, stand at t on
      -- this period's windows, until the newer one would have left the
      -- sliding window under the old period.
      cut = (floor(st / sd) + 2) * sd
      sc, sp = sc + sp, 0
      if now >= cut then
        sc, cut = 0, nil
      end
    end
    local sw = floor(st / period)
    if sw > win then
      win = sw
      at = win * period
    end
    if sw == win then
      cur, prev = sc, sp
    elseif sw == win - 1 then
      prev = sc
    end
  end
end
local e = at - win * period -- time elapsed in the current window
local skew = at - now

-- weighs returns whether prev*(period-e) + c*period <= x*period, without
-- forming a product past 2^52 (counts of another period can exceed the
-- limit).
local function weighs(c, x)
  if c > x then
    return false
  end
  return prev == 0 or period - e <= floor((x - c) * period / prev)
end

local allowed, retry = 0, 0
if cost > limit then
  retry = -1
elseif cost == 0 or weighs(cur + cost, limit) then
  allowed = 1
  cur = cur + cost
else
  -- Still in this window: prev*(period-e-w) <= (limit-cur-cost)*period.
  local free = (limit - cur - cost) * period
  local w
  if prev > 0 and free >= prev then
    w = period - e - floor(free / prev)
  else
    -- In the next window prev' = cur and cur' = 0, at e' = w - (period - e):
    -- cur*(period-e') + cost*period <= lp.
    local e2 = 0
    if cur > 0 then
      e2 = period - floor((limit - cost) * period / cur)
      if e2 < 0 then
        e2 = 0
      end
    end
    if e2 < period then
      w = period - e + e2
    else
      w = 2 * period - e -- both counts gone
    end
  end
  retry = w + skew
end

-- remaining: limit - cur - ceil(prev*(period-e)/period), at least 0.
local remaining = 0
if weighs(cur, limit) then
  remaining = limit - cur + floor(-prev * (period - e) / period)
end
local reset = 0
if cur > 0 then
  reset = 2 * period - e + skew
elseif prev > 0 then
  reset = period - e + skew
end
if cut and not (allowed == 1 and cost > 0) then
  -- Counts of another period end at cut at the latest, unless this
  -- decision writes them under this period.
  if reset > cut - now then
    reset = cut - now
  end
  if retry > reset then
    retry = reset
  end
end
if allowed == 1 and cost > 0 and not peek then
  -- The TTL goes with the value: until both counts have left the window,
  -- in whole ms, at least 2 ms.
  local ms = floor((reset + 999) / 1000)
  if ms < 2 then
    ms = 2
  end
  redis.call('SET', key, format('%d:%d:%d:%d', at, cur, prev, period), 'PX', format('%d', ms))
elseif found and not peek and redis.call('PTTL', key) == -1 then
  lib().expire_in(key, reset) -- repair a key found without TTL
end
return {allowed, remaining, retry, reset}