-- ConcurrencyRelease gives back the slot that holder id took with
-- concurrency_acquire. Releasing a lease that has expired or was never
-- taken is harmless.
--
-- @script concurrency_release
-- @key holders        sorted set: one member per holder id, scored by its lease expiry in µs
-- @arg id string      the holder given to concurrency_acquire; 1 to 256 bytes
-- @arg now int?       client clock in µs since the Unix epoch; Redis TIME when unset
-- @return released bool     whether id held a live lease
-- @return holders int       live leases left
-- @return reset_after int   µs until every lease left has expired

-- Removing id also removes every expired member. TTL: until the last lease
-- left expires, rounded up to whole ms and at least 2 ms; the key is deleted
-- when none is left.

-- Repair: a key found without TTL (PTTL -1) gets its TTL back on any call,
-- even one that removes nothing.

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
    return redis.error_reply('ERR sluice: concurrency_release: ' .. msg)
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

-- Arguments: the usual ARGV (both present, id 1 to 256 bytes, now empty
-- or decimal digits and in range) passes one check; anything else goes
-- through int_arg, which accepts the same values and names the first bad
-- one.
local id, now = ARGV[1], nil
if #ARGV == 2 and find(ARGV[2], '^%d*$') then
  now = tonumber(ARGV[2])
end
if not (id and id ~= '' and #id <= 256 and (now and now <= MAX or ARGV[2] == '')) then
  local h = lib()
  if id == nil or id == '' or #id > 256 then
    return h.bad('id must be 1 to 256 bytes')
  end
  local err
  now, err = h.int_arg(2, 'now', 0, MAX, true)
  if err then return h.bad(err) end
end
if not now then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end

local key = KEYS[1]
local mine = tonumber(redis.call('ZSCORE', key, id) or '')
local released = 0
if mine ~= nil and mine > now then
  released = 1
end
if mine ~= nil then
  redis.call('ZREM', key, id)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', format('%d', now))
end
local live = redis.call('ZCOUNT', key, '(' .. format('%d', now), '+inf')
local reset = 0
if live > 0 then
  local last = redis.call('ZRANGE', key, '-1', '-1', 'WITHSCORES')
  reset = tonumber(last[2]) - now
end
if mine ~= nil then
  if reset > 0 then
    -- Until the last lease left expires, in whole ms, at least 2 ms.
    local ms = floor((reset + 999) / 1000)
    if ms < 2 then
      ms = 2
    end
    redis.call('PEXPIRE', key, format('%d', ms))
  else
    redis.call('DEL', key)
  end
elseif redis.call('PTTL', key) == -1 then
  lib().expire_in(key, reset) -- repair a key found without TTL
end
return {released, live, reset}