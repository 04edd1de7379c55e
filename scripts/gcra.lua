-- GCRA checks and charges a GCRA (generic cell rate algorithm) limit with
-- emission interval T = period/limit and tolerance (burst-1)*T: a request of
-- cost c is allowed iff max(TAT, now) + c*T - now <= burst*T, where TAT is
-- the theoretical arrival time; it then moves TAT to max(TAT, now) + c*T.
-- Decision for decision, this equals a token bucket of burst tokens refilled
-- at limit per period.
--
-- remaining is the largest cost admitted right after this decision;
-- retry_after is 0 when allowed, -1 when cost > burst, else the exact time
-- until the same cost is admitted; reset_after is the time until TAT is
-- reached (the state is empty). A denied request, a cost of 0 and a peek
-- change nothing. Times are in µs; burst*period/gcd(limit, period) must not
-- exceed 2^52.
--
-- When the limit changes, TAT stays: until the next admission the time it
-- stands ahead of now counts in intervals of the rate it was written under
-- (the tokens the bucket misses), held against the new burst; that
-- admission rounds them up to whole intervals and moves TAT on under the
-- new rate (docs/algorithms.md, "When a limit changes").
--
-- @script gcra
-- @key state          string "tat:r:l:p": TAT in whole µs and its fraction r in 1/l µs, written under the rate l/p = limit/period in lowest terms
-- @arg limit int      requests per period, >= 1
-- @arg period int     period in µs, >= 1
-- @arg burst int      requests admitted at once, >= 1
-- @arg cost int       units this request takes, >= 0 (0 only reports)
-- @arg now int?       client clock in µs since the Unix epoch; Redis TIME when unset
-- @arg peek bool?     decide as for cost and reply as if charged, but write nothing (Limiter.Peek)
-- @return allowed bool
-- @return remaining int     largest cost admitted right after this decision
-- @return retry_after int   µs until the same cost is admitted; 0 if allowed, -1 if it never fits
-- @return reset_after int   µs until the state is empty

-- Exactness: T = period/limit, taken in lowest terms p/l, is rarely a whole
-- number of µs, so TAT is kept as whole µs plus a remainder r in [0, l)
-- counting 1/l µs, and c*T is added as the quotient and remainder of c*p
-- by l. Every
-- comparison is an exact integer one: no drift however long it runs, and
-- the same decisions as the token bucket. TTL: until TAT, rounded up to
-- whole ms and at least 2 ms (a missing key reads as TAT <= now), written
-- with the value by SET ... PX; no change of the limit moves TAT, so none
-- outlives it. Memory: one string of at most 67 bytes per identity (27 for
-- 100 per minute).

-- Cost per decision: GET, then SET ... PX when a request is charged, else
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
    return redis.error_reply('ERR sluice: gcra: ' .. msg)
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

-- Arguments: the usual ARGV (all six present, each empty or decimal digits,
-- every number in range) passes one check; anything else goes through
-- int_arg, which accepts the same values and names the first bad one.
local limit, period, burst, cost, now, peek
if #ARGV == 6 and find(table.concat(ARGV), '^%d+$') then
  limit, period, burst, cost, now, peek = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6]
end
if not (limit and period and burst and cost and limit >= 1 and limit <= MAX and period >= 1 and period <= MAX_PERIOD
    and burst >= 1 and burst <= MAX and cost <= MAX and (now and now <= MAX or ARGV[5] == '')
    and (peek == '' or peek == '0' or peek == '1')) then
  local h = lib()
  local err
  limit, err = h.int_arg(1, 'limit', 1, MAX)
  if err then return h.bad(err) end
  period, err = h.int_arg(2, 'period', 1, MAX_PERIOD)
  if err then return h.bad(err) end
  burst, err = h.int_arg(3, 'burst', 1, MAX)
  if err then return h.bad(err) end
  if burst * (period / h.gcd(limit, period)) > MAX then
    return h.bad('burst*period/gcd(limit, period) must not exceed ' .. h.fmt(MAX))
  end
  cost, err = h.int_arg(4, 'cost', 0, MAX)
  if err then return h.bad(err) end
  now, err = h.int_arg(5, 'now', 0, MAX, true)
  if err then return h.bad(err) end
  peek = ARGV[6]
  if peek ~= nil and peek ~= '' and peek ~= '0' and peek ~= '1' then
    return h.bad('peek must be 1, 0 or empty, got "' .. string.sub(peek, 1, 24) .. '"')
  end
end
peek = peek == '1'
-- T = period/limit is used in lowest terms: the same T, smaller products.
-- (a % b is exact here: both are integers below 2^53. gopher-lua assigns
-- g, m = m, g % m left to right, so the remainder gets its own local.)
local g, m = limit, period
while m > 0 do
  local r = g % m
  g, m = m, r
end
limit, period = limit / g, period / g
local bp = burst * period -- burst*T, in 1/limit µs
if bp > MAX then
  local h = lib()
  return h.bad('burst*period/gcd(limit, period) must not exceed ' .. h.fmt(MAX))
end
if not now then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end

-- State: "tat:r:l:p": TAT = tat + r/l µs, written under the rate l/p in
-- lowest terms. A missing key reads as TAT <= now; so does a key of
-- another type (such as the hash earlier versions kept) or a string of
-- another form, which the next admission replaces. "tat" and "tat:r",
-- which earlier versions wrote, read as written under the caller's rate.
local key = KEYS[1]
local v = redis.pcall('GET', key)
local found = type(v) == 'string'
local tat, rem = now, 0 -- TAT = tat + rem/wl, never earlier than now
local wl, wp = limit, period -- the rate TAT was written under
if found then
  local st, sr, sl, sp = string.match(v, '^(%d+):(%d+):(%d+):(%d+)$')
  st, sr, sl, sp = tonumber(st), tonumber(sr), tonumber(sl), tonumber(sp)
  if not st then
    st, sr, sl, sp = tonumber(v), 0, limit, period
    if not st then
      st, sr = string.match(v, '^(%d+):(%d+)$')
      st, sr = tonumber(st), tonumber(sr)
    end
    if st and sr and sr >= limit then
      st, sr = st + 1, 0 -- a remainder of another limit: round TAT up
    end
  end
  if st and sr and st % 1 == 0 and st <= 2 * MAX and sl >= 1 and sl <= MAX and sp >= 1 and sp <= MAX_PERIOD
      and sr < sl and (st > now or (st == now and sr > 0)) then
    tat, rem, wl, wp = st, sr, sl, sp
  end
end

-- Until the next admission, TAT - now counts in intervals of the rate it
-- was written under, wp/wl (the tokens the bucket misses), and the burst is
-- the caller's: allowed iff (tat-now)*wl + rem + cost*wp <= burst*wp,
-- compared as tat-now <= floor((burst*wp - cost*wp - rem)/wl) without
-- forming (tat-now)*wl, which a far-ahead TAT could make inexact; the
-- difference is the wait. (Under the caller's rate, burst*period <= 2^52;
-- under another, a product past 2^52 is capped there, which can only
-- lengthen a wait.)
local d = tat - now
local allowed, retry = 0, 0
if cost > burst then
  retry = -1
else
  local room = (burst - cost) * wp
  if wp ~= period and room > MAX then
    room = MAX
  end
  local wait = d - floor((room - rem) / wl)
  if wait > 0 and cost > 0 then
    retry = wait
  else
    allowed = 1
    if cost > 0 then
      if wl == limit and wp == period then
        local cp = cost * period
        local q = floor(cp / limit)
        tat, rem = tat + q, rem + cp - q * limit
        if rem >= limit then
          tat, rem = tat + 1, rem - limit
        end
      else
        -- The first admission under another rate: the intervals TAT stood
        -- ahead, rounded up to whole ones, and cost, at the caller's rate.
        local cp = (-floor(-(d * wl + rem) / wp) + cost) * period
        local q = floor(cp / limit)
        tat, rem = now + q, cp - q * limit
      end
      wl, wp = limit, period
      d = tat - now
    end
  end
end

-- remaining: burst less the intervals TAT stands ahead, rounded up.
local remaining = 0
if d <= floor((MAX - rem) / wl) then
  remaining = burst + floor(-(d * wl + rem) / wp)
  if remaining < 0 then
    remaining = 0
  end
end
local reset = d
if rem > 0 then
  reset = d + 1
end
if allowed == 1 and cost > 0 and not peek then
  -- The TTL goes with the value: until TAT, in whole ms, at least 2 ms.
  local ms = floor((reset + 999) / 1000)
  if ms < 2 then
    ms = 2
  end
  redis.call('SET', key, format('%d:%d:%d:%d', tat, rem, limit, period), 'PX', format('%d', ms))
elseif found and not peek and redis.call('PTTL', key) == -1 then
  lib().expire_in(key, reset) -- repair a key found without TTL
end
return {allowed, remaining, retry, reset}