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
-- @script token_bucket
-- @key state          hash {t = time of the level in µs, v = level in 1/p tokens, p = period/gcd(limit, period)}
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
-- g = gcd(limit, period)), the level is kept in units of 1/p token, so
-- refilling adds exactly l units per µs and every result is an exact
-- integer: no drift however long the bucket runs. A stored time
-- ahead of the caller's clock (another client's clock runs ahead) is kept:
-- the bucket refills from that time on. TTL: until the bucket is full again,
-- rounded up to whole ms and at least 2 ms (a missing key reads as a full
-- bucket). Memory: one hash with two fields per identity.

-- Repair: a key found without TTL (PTTL -1) gets its TTL back on any call;
-- that is the only write a denied request or a cost of 0 can make.

local MAX = 4503599627370496 -- 2^52: integers up to here are exact in Lua numbers
local MAX_PERIOD = 1125899906842624 -- 2^50 µs, about 35 years

local function fmt(x)
  return string.format('%d', x)
end

local function bad(msg)
  return redis.error_reply('ERR sluice: token_bucket: ' .. msg)
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
-- The rate limit/period is used in lowest terms: the same rate, smaller
-- products.
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
local st = redis.call('HMGET', key, 't', 'v')
local stt, stv = tonumber(st[1] or ''), tonumber(st[2] or '')

local cap = burst * period -- a full bucket, in 1/period tokens
local at = now             -- the time the level is known at
local level = cap
if stt and stv then
  level = stv
  if level > cap then
    level = cap
  elseif level < 0 then
    level = 0
  end
  if stt > now then
    at = stt
  elseif level < cap then
    if now - stt >= ceildiv(cap - level, limit) then
      level = cap
    else
      level = level + (now - stt) * limit
    end
  end
end
local skew = at - now

local allowed, retry, wrote = 0, 0, false
local need = cost * period
if cost > burst then
  retry = -1
elseif need <= level then
  allowed = 1
  if cost > 0 then
    level = level - need
    if not peek then
      redis.call('HSET', key, 't', fmt(at), 'v', fmt(level))
      wrote = true
    end
  end
else
  retry = ceildiv(need - level, limit) + skew
end

local reset = 0
if level < cap then
  reset = ceildiv(cap - level, limit) + skew
end
if wrote then
  expire_in(key, reset)
elseif not peek and st[1] and redis.call('PTTL', key) == -1 then
  expire_in(key, reset) -- repair a key found without TTL
end
local remaining = divmod(level, period)
return {allowed, remaining, retry, reset}