-- SlidingLog checks and charges a sliding-log limit: a request is allowed
-- iff the cost admitted in (now - period, now] plus its own cost is at most
-- limit. Every admitted unit of cost is logged with its time, so the window
-- is exact at µs resolution.
--
-- remaining is the largest cost admitted right after this decision;
-- retry_after is 0 when allowed, -1 when cost > limit, else the time until
-- enough logged units have left the window; reset_after is the time until
-- the log is empty. A denied request and a cost of 0 change nothing.
-- Times are in µs.
--
-- @script sliding_log
-- @key log            sorted set: one member per admitted unit, scored by its time in µs
-- @arg limit int      units admitted per period, >= 1
-- @arg period int     window length in µs, >= 1
-- @arg cost int       units this request takes, >= 0 (0 only reports)
-- @arg now int?       client clock in µs since the Unix epoch; Redis TIME when unset
-- @return allowed bool
-- @return remaining int     largest cost admitted right after this decision
-- @return retry_after int   µs until the same cost is admitted; 0 if allowed, -1 if it never fits
-- @return reset_after int   µs until the log is empty

-- State: a request of cost c adds c members "<now>:<i>" scored now, where i
-- continues the count of members already scored now, so members stay unique
-- when requests share a timestamp (members with one score are only ever
-- removed together). Units at or before now - period are removed when a
-- request is admitted; a denied request only reads. Memory: at most limit
-- members, since units are added only after the expired ones are removed and
-- only when the units left plus the new ones fit in limit. TTL: until the
-- newest unit leaves the window, rounded up to whole ms. Work per call:
-- O(log limit + cost).

-- Repair: a key found without TTL (PTTL -1) gets its TTL back on any call;
-- that is the only write a denied request or a cost of 0 can make.

local MAX = 4503599627370496 -- 2^52: integers up to here are exact in Lua numbers
local MAX_PERIOD = 1125899906842624 -- 2^50 µs, about 35 years

local function fmt(x)
  return string.format('%d', x)
end

local function bad(msg)
  return redis.error_reply('ERR sluice: sliding_log: ' .. msg)
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

-- expire_in gives key a TTL of us rounded up to whole ms, or deletes it when
-- its useful life is over.
local function expire_in(key, us)
  if us <= 0 then
    redis.call('DEL', key)
  else
    redis.call('PEXPIRE', key, fmt(ceildiv(us, 1000)))
  end
end

local limit, err = int_arg(1, 'limit', 1, MAX)
if err then return bad(err) end
local period
period, err = int_arg(2, 'period', 1, MAX_PERIOD)
if err then return bad(err) end
local cost
cost, err = int_arg(3, 'cost', 0, MAX)
if err then return bad(err) end
local now
now, err = int_arg(4, 'now', 0, MAX, true)
if err then return bad(err) end
if now == nil then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local key = KEYS[1]
local oldest = '(' .. fmt(now - period) -- the window is (now - period, now]
local used = redis.call('ZCOUNT', key, oldest, '+inf')

local allowed, retry, wrote = 0, 0, false
if cost > limit then
  retry = -1
elseif used + cost <= limit then
  allowed = 1
  if cost > 0 then
    redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt(now - period))
    local at = fmt(now)
    local seq = redis.call('ZCOUNT', key, at, at)
    local i = 1
    while i <= cost do
      local batch = {}
      local last = i + 499
      if last > cost then
        last = cost
      end
      for j = i, last do
        batch[#batch + 1] = at
        batch[#batch + 1] = at .. ':' .. fmt(seq + j)
      end
      redis.call('ZADD', key, unpack(batch))
      i = last + 1
    end
    used = used + cost
    wrote = true
  end
else
  -- The (used + cost - limit)-th oldest unit in the window must leave it.
  local e = redis.call('ZRANGEBYSCORE', key, oldest, '+inf', 'WITHSCORES', 'LIMIT', fmt(used + cost - limit - 1), '1')
  retry = tonumber(e[2]) + period - now
end

local reset = 0
if used > 0 then
  local newest = redis.call('ZRANGE', key, '-1', '-1', 'WITHSCORES')
  reset = tonumber(newest[2]) + period - now
end
if wrote then
  expire_in(key, reset)
elseif redis.call('PTTL', key) == -1 then
  expire_in(key, reset) -- repair a key found without TTL
end
local remaining = limit - used
if remaining < 0 then
  remaining = 0
end
return {allowed, remaining, retry, reset}