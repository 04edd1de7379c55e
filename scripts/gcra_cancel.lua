-- GCRACancel gives back a reservation gcra_reserve made that the caller
-- will not use (Reservation.Cancel), as much of it as it still can: nothing
-- once the reservation conforms (act_at has come: it may have been used),
-- and never the emissions of the reservations booked after it, whose
-- moments stay as promised. What comes back is the reservation's emission
-- (cost*T) less the emissions booked after it: TAT moves back by that.
-- restored is what came back, in whole µs of emission.
--
-- @script gcra_cancel
-- @key state          string "tat:r:l:p", as gcra keeps it
-- @arg limit int      requests per period, >= 1
-- @arg period int     period in µs, >= 1
-- @arg cost int       the units reserved, >= 1
-- @arg tat int        the TAT the reservation wrote (gcra_reserve's tat)
-- @arg rem int        and its remainder (gcra_reserve's rem)
-- @arg act_at int     when the reservation conforms (gcra_reserve's act_at)
-- @arg now int?       client clock in µs since the Unix epoch; Redis TIME when unset
-- @return restored int      µs of emission given back (rounded down)

-- State and TTL as in gcra. A state written under another rate than the
-- caller's (the limit changed since the reservation) gives nothing back.

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
    return redis.error_reply('ERR sluice: gcra_cancel: ' .. msg)
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

local limit, period, cost, rtat, rrem, act_at, now
if #ARGV == 7 and find(table.concat(ARGV), '^%d+$') then
  limit, period, cost, rtat, rrem, act_at, now = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
end
if not (limit and period and cost and rtat and rrem and act_at and limit >= 1 and limit <= MAX and period >= 1
    and period <= MAX_PERIOD and cost >= 1 and cost <= MAX and rtat <= 2 * MAX and rrem <= MAX and act_at <= 2 * MAX
    and (now and now <= MAX or ARGV[7] == '')) then
  local h = lib()
  local err
  limit, err = h.int_arg(1, 'limit', 1, MAX)
  if err then return h.bad(err) end
  period, err = h.int_arg(2, 'period', 1, MAX_PERIOD)
  if err then return h.bad(err) end
  cost, err = h.int_arg(3, 'cost', 1, MAX)
  if err then return h.bad(err) end
  rtat, err = h.int_arg(4, 'tat', 0, 2 * MAX)
  if err then return h.bad(err) end
  rrem, err = h.int_arg(5, 'rem', 0, MAX)
  if err then return h.bad(err) end
  act_at, err = h.int_arg(6, 'act_at', 0, 2 * MAX)
  if err then return h.bad(err) end
  now, err = h.int_arg(7, 'now', 0, MAX, true)
  if err then return h.bad(err) end
end
local g, m = limit, period
while m > 0 do
  local r = g % m
  g, m = m, r
end
limit, period = limit / g, period / g
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
local st, sr, sl, sp = string.match(v, '^(%d+):(%d+):(%d+):(%d+)$')
st, sr, sl, sp = tonumber(st), tonumber(sr), tonumber(sl), tonumber(sp)
if not st then
  st, sr, sl, sp = tonumber(v), 0, limit, period
  if not st then
    st, sr = string.match(v, '^(%d+):(%d+)$')
    st, sr = tonumber(st), tonumber(sr)
  end
  if st and sr and sr >= limit then
    st, sr = st + 1, 0
  end
end
-- A state written under another rate (the limit changed since the
-- reservation) has nothing known to give back.
if not (st and sr and st % 1 == 0 and st <= 2 * MAX and sl == limit and sp == period and sr < limit) then
  return {0}
end
-- The emissions booked after the reservation, in 1/limit µs; negative when
-- the state went back (a Reset, another cancel): then nothing is known.
local later = (st - rtat) * limit + sr - rrem
local back = cost * period - later
if later < 0 or back <= 0 then
  return {0}
end
local q = floor(back / limit)
st, sr = st - q, sr - (back - q * limit)
if sr < 0 then
  st, sr = st - 1, sr + limit
end
if st < now or (st == now and sr == 0) then
  redis.call('DEL', key)
else
  local life = st - now
  if sr > 0 then
    life = life + 1
  end
  local ms = floor((life + 999) / 1000)
  if ms < 2 then
    ms = 2
  end
  redis.call('SET', key, format('%d:%d:%d:%d', st, sr, limit, period), 'PX', format('%d', ms))
end
return {floor(back / limit)}