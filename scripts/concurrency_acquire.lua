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
    return redis.error_reply('ERR sluice: concurrency_acquire: ' .. msg)
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

-- Arguments: the usual ARGV (all four present, limit, lease and now empty
-- or decimal digits and in range, id 1 to 256 bytes) passes one check;
-- anything else goes through int_arg, which accepts the same values and
-- names the first bad one.
local limit, lease, id, now
if #ARGV == 4 and find(ARGV[1] .. ARGV[2] .. ARGV[4], '^%d+$') then
  limit, lease, id, now = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
end
if not (limit and lease and limit >= 1 and limit <= MAX and lease >= 1 and lease <= MAX_PERIOD
    and id ~= '' and #id <= 256 and (now and now <= MAX or ARGV[4] == '')) then
  local h = lib()
  local err
  limit, err = h.int_arg(1, 'limit', 1, MAX)
  if err then return h.bad(err) end
  lease, err = h.int_arg(2, 'lease', 1, MAX_PERIOD)
  if err then return h.bad(err) end
  id = ARGV[3]
  if id == nil or id == '' or #id > 256 then
    return h.bad('id must be 1 to 256 bytes')
  end
  now, err = h.int_arg(4, 'now', 0, MAX, true)
  if err then return h.bad(err) end
end
if not now then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end

local key = KEYS[1]
local after = '(' .. format('%d', now)
local live = redis.call('ZCOUNT', key, after, '+inf')
local mine = tonumber(redis.call('ZSCORE', key, id) or '')
local held = mine ~= nil and mine > now

local allowed, retry, wrote = 0, 0, false
if held or live < limit then
  allowed = 1
  redis.call('ZREMRANGEBYSCORE', key, '-inf', format('%d', now))
  redis.call('ZADD', key, format('%d', now + lease), id)
  if not held then
    live = live + 1
  end
  wrote = true
else
  -- The (live - limit + 1)-th earliest expiry frees the first slot.
  local e = redis.call('ZRANGEBYSCORE', key, after, '+inf', 'WITHSCORES', 'LIMIT', format('%d', live - limit), '1')
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
  -- Until the last lease expires, in whole ms, at least 2 ms.
  local ms = floor((reset + 999) / 1000)
  if ms < 2 then
    ms = 2
  end
  redis.call('PEXPIRE', key, format('%d', ms))
elseif redis.call('PTTL', key) == -1 then
  lib().expire_in(key, reset) -- repair a key found without TTL
end
return {allowed, remaining, retry, reset}