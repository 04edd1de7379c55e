-- TokenBucketCancel gives back a reservation token_bucket_reserve made that
-- the caller will not use (Reservation.Cancel), as much of it as it still
-- can: nothing once the reservation conforms (act_at has come: it may have
-- been used), and never the tokens of the reservations booked after it,
-- whose moments stay as promised. It reads the bucket as a GCRA's TAT (the
-- moment the bucket is full again): what comes back is the reservation's
-- cost less what was booked after it (how far that TAT moved past the one
-- the reservation wrote), and the tokens return to the bucket at once.
-- restored is what came back, in whole µs of refill.
--
-- @script token_bucket_cancel
-- @key state          string "t:d:l:p", as token_bucket keeps it
-- @arg limit int      tokens added per period, >= 1
-- @arg period int     refill period in µs, >= 1
-- @arg burst int      bucket capacity in tokens, >= 1
-- @arg cost int       the tokens reserved, >= 1
-- @arg tat int        the state the reservation wrote, as a TAT (token_bucket_reserve's tat)
-- @arg rem int        and its remainder (token_bucket_reserve's rem)
-- @arg act_at int     when the reservation conforms (token_bucket_reserve's act_at)
-- @arg now int?       client clock in µs since the Unix epoch; Redis TIME when unset
-- @return restored int      µs of refill given back (rounded down)

-- State and TTL as in token_bucket. A state written under another rate
-- than the caller's (the limit changed since the reservation) gives
-- nothing back.

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
    return redis.error_reply('ERR sluice: token_bucket_cancel: ' .. msg)
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

local limit, period, burst, cost, rtat, rrem, act_at, now
if #ARGV == 8 and find(table.concat(ARGV), '^%d+$') then
  limit, period, burst, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
  rtat, rrem, act_at, now = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
end
if not (limit and period and burst and cost and rtat and rrem and act_at and limit >= 1 and limit <= MAX
    and period >= 1 and period <= MAX_PERIOD and burst >= 1 and burst <= MAX and cost >= 1 and cost <= MAX
    and rtat <= 2 * MAX and rrem <= MAX and act_at <= 2 * MAX and (now and now <= MAX or ARGV[8] == '')) then
  local h = lib()
  local err
  limit, err = h.int_arg(1, 'limit', 1, MAX)
  if err then return h.bad(err) end
  period, err = h.int_arg(2, 'period', 1, MAX_PERIOD)
  if err then return h.bad(err) end
  burst, err = h.int_arg(3, 'burst', 1, MAX)
  if err then return h.bad(err) end
  cost, err = h.int_arg(4, 'cost', 1, MAX)
  if err then return h.bad(err) end
  rtat, err = h.int_arg(5, 'tat', 0, 2 * MAX)
  if err then return h.bad(err) end
  rrem, err = h.int_arg(6, 'rem', 0, MAX)
  if err then return h.bad(err) end
  act_at, err = h.int_arg(7, 'act_at', 0, 2 * MAX)
  if err then return h.bad(err) end
  now, err = h.int_arg(8, 'now', 0, MAX, true)
  if err then return h.bad(err) end
end
local g, m = limit, period
while m > 0 do
  local r = g % m
  g, m = m, r
end
limit, period = limit / g, period / g
local cap = burst * period
if cap > MAX then
  local h = lib()
  return h.bad('burst*period/gcd(limit, period) must not exceed ' .. h.fmt(MAX))
end
if not now then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end
if now >= act_at then
  return {0} -- it conforms: it may have been used
end

local key = KEYS[1]
local v = redis.pcall('GET', key)
if type(v) ~= 'string' then
  return {0}
end
local at, empty, sl, sp = string.match(v, '^(%d+):(%d+):(%d+):(%d+)$')
at, empty, sl, sp = tonumber(at), tonumber(empty), tonumber(sl), tonumber(sp)
if not at then
  local level
  at, level = string.match(v, '^(%d+):(%d+)$')
  at, level, sl, sp = tonumber(at), tonumber(level), limit, period
  if level then
    empty = cap - level
    if empty < 0 then
      empty = 0
    end
  end
end
-- A state written under another rate (the limit changed since the
-- reservation) has nothing known to give back.
if not (at and empty and at <= 2 * MAX and empty <= MAX and sl == limit and sp == period) then
  return {0}
end
-- The state as a TAT: st whole µs and sr in 1/limit µs.
local st = floor(empty / limit)
local sr = empty - st * limit
st = at + st
-- What was booked after the reservation, in 1/period tokens (1/limit µs);
-- negative when the state went back (a Reset, another cancel): then
-- nothing is known.
if cost > burst or st - rtat > cap / limit + 1 then
  return {0} -- no reservation of this cost, or more booked after it than it holds
end
local later = (st - rtat) * limit + sr - rrem
local back = cost * period - later
if later < 0 or back <= 0 then
  return {0}
end
-- The TAT moves back by back. The level is written as of now (a time
-- ahead would let the tokens given back be taken before they refill).
local q = floor(back / limit)
st, sr = st - q, sr - (back - q * limit)
if sr < 0 then
  st, sr = st - 1, sr + limit
end
if st < now or (st == now and sr == 0) then
  redis.call('DEL', key) -- full by now
  return {q}
end
-- The level is known at the first whole µs at which it is not negative,
-- or now (rounding gives back less, never more).
at = st - floor((cap - sr) / limit)
if at < now then
  at = now
end
empty = (st - at) * limit + sr
local life = st - now
if sr > 0 then
  life = life + 1
end
local ms = floor((life + 999) / 1000)
if ms < 2 then
  ms = 2
end
redis.call('SET', key, format('%d:%d:%d:%d', at, empty, limit, period), 'PX', format('%d', ms))
return {q}