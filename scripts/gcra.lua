-- Gcra checks and charges a GCRA (generic cell rate algorithm) limit with
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
-- @script gcra
-- @key state          hash {tat = whole µs of TAT, r = its fraction in 1/l µs, l = limit/gcd(limit, period)}
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
-- whole ms and at least 2 ms (a missing key reads as TAT <= now). Memory:
-- one hash with two fields per identity.

-- Repair: a key found without TTL (PTTL -1) gets its TTL back on any call;
-- that is the only write a denied request or a cost of 0 can make.

local MAX = 4503599627370496 -- 2^52: integers up to here are exact in Lua numbers
local MAX_PERIOD = 1125899906842624 -- 2^50 µs, about 35 years

local function fmt(x)
  return string.format('%d', x)
end

local function bad(msg)
  return redis.error_reply('ERR sluice: gcra: ' .. msg)
end

-- int_arg returns ARGV[i] as an integer in [lo, hi]; nil, nil when it is
-- unset and optional; nil and a message when it is malformed.
local function int_arg(i, name, lo, hi, optional)
  local s = ARGV[i]
  if s == nil or s == '' then
    if optional then
      return nil, nil
    end
    return nil, name .. ' is required'
  end
  if #s > 16 or not string.find(s, '^%d+$') then
    return nil, name .. ' must be a non-negative decimal integer, got "' .. string.sub(s, 1, 24) .. '"'
  end
  local v = tonumber(s)
  if v < lo or v > hi then
    return nil, name .. ' must be between ' .. fmt(lo) .. ' and ' .. fmt(hi) .. ', got ' .. s
  end
  return v, nil
end

-- divmod returns floor(a / b) and a - floor(a / b) * b, exactly, for
-- integers |a| < 2^53 and b > 0.
local function divmod(a, b)
  local q = math.floor(a / b)
  local r = a - q * b
  if r < 0 then
    q, r = q - 1, r + b
  elseif r >= b then
    q, r = q + 1, r - b
  end
  return q, r
end

local function ceildiv(a, b)
  local q, r = divmod(a, b)
  if r > 0 then
    q = q + 1
  end
  return q
end

-- gcd returns the greatest common divisor of positive integers a and b.
local function gcd(a, b)
  while b > 0 do
    local _, r = divmod(a, b)
    a, b = b, r
  end
  return a
end

-- expire_in gives key a TTL of us rounded up to whole ms and at least 2 ms,
-- or deletes it when its useful life is over. Redis expires a key at a whole
-- ms, so a TTL of 1 ms can end a few µs after it is set (Redis 7.0 can even
-- drop the key at once); 2 ms always outlive 1 ms.
local function expire_in(key, us)
  if us <= 0 then
    redis.call('DEL', key)
  else
    if us < 2000 then
      us = 2000
    end
    redis.call('PEXPIRE', key, fmt(ceildiv(us, 1000)))
  end
end

local limit, err = int_arg(1, 'limit', 1, MAX)
if err then return bad(err) end
local period
period, err = int_arg(2, 'period', 1, MAX_PERIOD)
if err then return bad(err) end
local burst
burst, err = int_arg(3, 'burst', 1, MAX)
if err then return bad(err) end
-- T = period/limit is used in lowest terms: the same T, smaller products.
local g = gcd(limit, period)
limit, period = limit / g, period / g
if burst * period > MAX then
  return bad('burst*period/gcd(limit, period) must not exceed ' .. fmt(MAX))
end
local cost
cost, err = int_arg(4, 'cost', 0, MAX)
if err then return bad(err) end
local now
now, err = int_arg(5, 'now', 0, MAX, true)
if err then return bad(err) end
local peek = ARGV[6]
if peek ~= nil and peek ~= '' and peek ~= '0' and peek ~= '1' then
  return bad('peek must be 1, 0 or empty, got "' .. string.sub(peek, 1, 24) .. '"')
end
peek = peek == '1'
if now == nil then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local key = KEYS[1]
local st = redis.call('HMGET', key, 'tat', 'r')
local stat, sr = tonumber(st[1] or ''), tonumber(st[2] or '')

-- TAT = tat + rem/limit, never earlier than now.
local tat, rem = now, 0
if stat and sr then
  if sr >= limit then
    stat, sr = stat + 1, 0 -- limit lowered since the write: round TAT up
  elseif sr < 0 then
    sr = 0
  end
  if stat > now or (stat == now and sr > 0) then
    tat, rem = stat, sr
  end
end
local bp = burst * period -- burst*T, in 1/limit µs

-- Allowed iff (tat-now)*limit + rem + cost*period <= bp, compared without
-- forming (tat-now)*limit, which a far-ahead TAT could make inexact.
local allowed, retry, wrote = 0, 0, false
if cost > burst then
  retry = -1
else
  local room = bp - cost * period - rem
  if room >= 0 and tat - now <= divmod(room, limit) then
    allowed = 1
    if cost > 0 then
      local q, m = divmod(cost * period, limit)
      tat, rem = tat + q, rem + m
      if rem >= limit then
        tat, rem = tat + 1, rem - limit
      end
      if not peek then
        redis.call('HSET', key, 'tat', fmt(tat), 'r', fmt(rem))
        wrote = true
      end
    end
  else
    retry = tat - now + ceildiv(rem + cost * period - bp, limit)
  end
end

local remaining = 0
local d = tat - now
local free = bp - rem
if free >= 0 and d <= divmod(free, limit) then
  remaining = divmod(free - d * limit, period)
end
local reset = d
if rem > 0 then
  reset = d + 1
end
if wrote then
  expire_in(key, reset)
elseif not peek and st[1] and redis.call('PTTL', key) == -1 then
  expire_in(key, reset) -- repair a key found without TTL
end
return {allowed, remaining, retry, reset}