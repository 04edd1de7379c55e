-- TokenBucket checks and charges a token-bucket limit: a bucket of burst
-- tokens, full at first, refilled continuously at limit tokens per period.
-- A request is allowed iff the bucket holds at least cost tokens; it then
-- takes them.
--
-- remaining is the whole tokens left right after this decision;
-- retry_after is 0 when allowed, -1 when cost > burst, else the exact time
-- until cost tokens are in the bucket; reset_after is the time until the
-- bucket is full. A denied request, a cost of 0 and a peek change nothing. Times are
-- in µs; burst*period/gcd(limit, period) must not exceed 2^52.
--
-- When the limit changes, the tokens missing carry over: the bucket holds
-- the new burst less them, and until the next admission they refill at the
-- rate they were taken at; that admission rounds them up to whole tokens
-- and writes them under the new rate (docs/algorithms.md, "When a limit
-- changes"). Decision for decision, this is gcra's rule.
--
-- @script token_bucket
-- @key state          string "t:d:l:p": at time t in µs the bucket misses d/p tokens, refilled at l/p tokens per µs (the rate in lowest terms)
-- @arg limit int      tokens added per period, >= 1
-- @arg period int     refill period in µs, >= 1
-- @arg burst int      bucket capacity in tokens, >= 1
-- @arg cost int       tokens this request takes, >= 0 (0 only reports)
-- @arg now int?       client clock in µs since the Unix epoch; Redis TIME when unset
-- @arg peek bool?     decide as for cost and reply as if charged, but write nothing (Limiter.Peek)
-- @return allowed bool
-- @return remaining int     whole tokens left right after this decision
-- @return retry_after int   µs until the same cost is admitted; 0 if allowed, -1 if it never fits
-- @return reset_after int   µs until the bucket is full

-- Exactness: with the rate in lowest terms l/p (l = limit/g, p = period/g,
-- g = gcd(limit, period)), what the bucket misses is kept in units of 1/p
-- token, so refilling takes exactly l units per µs and every result is an
-- exact integer: no drift however long the bucket runs. The rate is stored
-- with it, so those units keep their meaning when the limit changes. A
-- stored time ahead of the caller's clock (another client's clock runs
-- ahead) is kept: the bucket refills from that time on. TTL: until the
-- bucket is full again, rounded up to whole ms and at least 2 ms (a missing
-- key reads as a full bucket), written with the value by SET ... PX; until
-- the next admission the bucket refills at the rate it was written under,
-- so no change of the limit makes it outlive its TTL. Memory: one string of
-- at most 67 bytes per identity (about 34 for 100 per minute).

-- Cost per decision: GET, then SET ... PX when tokens are taken, else PTTL
-- when the key exists (TIME first when now is unset); the arguments are
-- checked at once in the usual case.

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
    return redis.error_reply('ERR sluice: token_bucket: ' .. msg)
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
-- The rate limit/period is used in lowest terms: the same rate, smaller
-- products.
-- (a % b is exact here: both are integers below 2^53. gopher-lua assigns
-- g, m = m, g % m left to right, so the remainder gets its own local.)
local g, m = limit, period
while m > 0 do
  local r = g % m
  g, m = m, r
end
limit, period = limit / g, period / g
local cap = burst * period -- a full bucket, in 1/period tokens
if cap > MAX then
  local h = lib()
  return h.bad('burst*period/gcd(limit, period) must not exceed ' .. h.fmt(MAX))
end
if not now then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end

-- State: "t:d:l:p": at time t the bucket misses d/p tokens of being full
-- and refills at l/p tokens per µs, the rate in lowest terms it was written
-- under. A missing key reads as a full bucket; so does a value of another
-- form or a key of another type (such as the hash earlier versions kept),
-- which the next admission replaces. "t:v", which earlier versions wrote
-- (the level v in 1/p tokens at t), reads as written under the caller's
-- rate.
local key = KEYS[1]
local v = redis.pcall('GET', key)
local found = type(v) == 'string'
local at = now -- the time the bucket is known at
local miss = 0 -- the tokens it misses then, in 1/wp tokens
local wl, wp = limit, period -- the rate it refills at
if found then
  local st, sd, sl, sp = string.match(v, '^(%d+):(%d+):(%d+):(%d+)$')
  st, sd, sl, sp = tonumber(st), tonumber(sd), tonumber(sl), tonumber(sp)
  if not st then
    st, sd = string.match(v, '^(%d+):(%d+)$')
    st, sd, sl, sp = tonumber(st), tonumber(sd), limit, period
    if sd then
      sd = cap - sd -- a level above a lowered burst reads as a full bucket
      if sd < 0 then
        sd = 0
      end
    end
  end
  if st and sd and st <= 2 * MAX and sd <= MAX and sl >= 1 and sl <= MAX and sp >= 1 and sp <= MAX_PERIOD then
    wl, wp = sl, sp
    if st > now then
      at, miss = st, sd
    elseif now - st < -floor(-sd / sl) then -- not full yet: ceil(sd/sl) µs of refill
      miss = sd - (now - st) * sl
    end
  end
end
local skew = at - now

-- Until the next admission the bucket refills at the rate it was written
-- under, and holds burst less what it misses: allowed iff
-- ceil(miss/wp) + cost <= burst, in whole tokens, the same test as
-- miss + cost*wp <= burst*wp. The first admission under another rate
-- writes what the bucket misses rounded up to whole tokens, with cost, at
-- the caller's rate.
local short = -floor(-miss / wp) -- whole tokens missing
local allowed, retry = 0, 0
if cost > burst then
  retry = -1
elseif short + cost <= burst or cost == 0 then
  allowed = 1
  if cost > 0 then
    if wl == limit and wp == period then
      miss = miss + cost * period
    else
      miss = (short + cost) * period
    end
    wl, wp, short = limit, period, short + cost
  end
else
  -- Until miss - w*wl <= (burst - cost)*wp, which is below miss + wp.
  retry = skew - floor(((burst - cost) * wp - miss) / wl)
end

local reset = 0
if miss > 0 then
  reset = skew - floor(-miss / wl)
end
if allowed == 1 and cost > 0 and not peek then
  -- The TTL goes with the value: until the bucket is full, in whole ms, at
  -- least 2 ms.
  local ms = floor((reset + 999) / 1000)
  if ms < 2 then
    ms = 2
  end
  redis.call('SET', key, format('%d:%d:%d:%d', at, miss, limit, period), 'PX', format('%d', ms))
elseif found and not peek and redis.call('PTTL', key) == -1 then
  lib().expire_in(key, reset) -- repair a key found without TTL
end
local remaining = burst - short
if remaining < 0 then
  remaining = 0
end
return {allowed, remaining, retry, reset}