-- ConcurrencyAcquire takes one of limit in-flight slots for the holder id,
-- for lease µs. A holder that crashes without releasing has its slot back
-- when its lease expires; a holder that still holds a live lease renews it
-- (its expiry becomes now + lease) without taking a second slot. Release
-- with concurrency_release.
--
-- remaining is the number of free slots right after this decision;
-- retry_after is 0 when allowed, else the time until enough leases expire
-- for a slot to free up (an earlier release frees one sooner); reset_after
-- is the time until every lease has expired. A denied request changes
-- nothing. Times are in µs.
--
-- @script concurrency_acquire
-- @key holders        sorted set: one member per holder id, scored by its lease expiry in µs
-- @arg limit int      slots, >= 1
-- @arg lease int      lease length in µs, >= 1
-- @arg id string      the holder, unique per in-flight operation (e.g. a random token); 1 to 256 bytes
-- @arg now int?       client clock in µs since the Unix epoch; Redis TIME when unset
-- @return allowed bool
-- @return remaining int     free slots right after this decision
-- @return retry_after int   µs until a slot frees by lease expiry; 0 if allowed
-- @return reset_after int   µs until every lease has expired

-- A lease is live while now < expiry. Expired members are removed when a
-- slot is taken, so the set holds at most limit members. TTL: until the
-- last lease expires, rounded up to whole ms and at least 2 ms.

-- Repair: a key found without TTL (PTTL -1) gets its TTL back on any call;
-- that is the only write a denied request can make.

local MAX = 4503599627370496 -- 2^52: integers up to here are exact in Lua numbers
local MAX_PERIOD = 1125899906842624 -- 2^50 µs, about 35 years

local function fmt(x)
  return string.format('%d', x)
end

local function bad(msg)
  return redis.error_reply('ERR sluice: concurrency_acquire: ' .. msg)
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
local lease
lease, err = int_arg(2, 'lease', 1, MAX_PERIOD)
if err then return bad(err) end
local id = ARGV[3]
if id == nil or id == '' or #id > 256 then
  return bad('id must be 1 to 256 bytes')
end
local now
now, err = int_arg(4, 'now', 0, MAX, true)
if err then return bad(err) end
if now == nil then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local key = KEYS[1]
local after = '(' .. fmt(now)
local live = redis.call('ZCOUNT', key, after, '+inf')
local mine = tonumber(redis.call('ZSCORE', key, id) or '')
local held = mine ~= nil and mine > now

local allowed, retry, wrote = 0, 0, false
if held or live < limit then
  allowed = 1
  redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt(now))
  redis.call('ZADD', key, fmt(now + lease), id)
  if not held then
    live = live + 1
  end
  wrote = true
else
  -- The (live - limit + 1)-th earliest expiry frees the first slot.
  local e = redis.call('ZRANGEBYSCORE', key, after, '+inf', 'WITHSCORES', 'LIMIT', fmt(live - limit), '1')
  retry = tonumber(e[2]) - now
end

local remaining = limit - live
if remaining < 0 then
  remaining = 0
end
local reset = 0
if live > 0 then
  local last = redis.call('ZRANGE', key, '-1', '-1', 'WITHSCORES')
  reset = tonumber(last[2]) - now
end
if wrote then
  expire_in(key, reset)
elseif redis.call('PTTL', key) == -1 then
  expire_in(key, reset) -- repair a key found without TTL
end
return {allowed, remaining, retry, reset}