-- GCRAReserve reserves cost units of a GCRA limit for a caller that will
-- wait for them (Limiter.Reserve, Limiter.Wait): unlike gcra, which admits
-- only what conforms now, it books the cost at the first moment it
-- conforms, if that is at most max_wait away, and moves TAT as an
-- admission at that moment would. The state is gcra's, on the same key, so
-- reservations and gcra's admissions spend one quota; waiters on one
-- identity are served in the order of their reservations (each books the
-- emission after the last one's).
--
-- A request of cost c conforms at the first µs t with
-- max(TAT, t) + c*T - t <= burst*T; delay is t - now (0 when it conforms
-- now). A reservation not made (ok 0) changes nothing; its delay is the wait
-- it would have needed, -1 when cost > burst. tat and rem are the TAT the
-- reservation wrote, as whole µs and a remainder in 1/l µs (l =
-- limit/gcd(limit, period)), for gcra_cancel. Times are in µs;
-- burst*period/gcd(limit, period) must not exceed 2^52.
--
-- @script gcra_reserve
-- @key state          string "tat:r:l:p", as gcra keeps it
-- @arg limit int      requests per period, >= 1
-- @arg period int     period in µs, >= 1
-- @arg burst int      requests admitted at once, >= 1
-- @arg cost int       units reserved, >= 1
-- @arg max_wait int   µs the caller will wait at most: a reservation that would conform later is not made
-- @arg now int?       client clock in µs since the Unix epoch; Redis TIME when unset
-- @return ok bool           the cost is reserved (charged)
-- @return delay int         µs until the reservation conforms; when not ok, the wait it would need, -1 if it never fits
-- @return act_at int        µs since the epoch (the clock the script used) at which it conforms; 0 when not ok
-- @return tat int           the TAT the reservation wrote, whole µs; 0 when not ok
-- @return rem int           its remainder in 1/l µs

-- A limit changed since TAT was written books as gcra admits: the
-- intervals TAT stands ahead count at the rate it was written under until
-- the moment the reservation conforms, and are rounded up to whole ones
-- then.
--
-- State, TTL and memory as in gcra: SET ... PX until TAT, rounded up to
-- whole ms and at least 2 ms. A TAT booked ahead is the reservation: gcra
-- denies on it until the emissions it holds have passed.

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
    return redis.error_reply('ERR sluice: gcra_reserve: ' .. msg)
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

local limit, period, burst, cost, max_wait, now
if #ARGV == 6 and find(table.concat(ARGV), '^%d+$') then
  limit, period, burst, cost, max_wait, now = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
end
if not (limit and period and burst and cost and max_wait and limit >= 1 and limit <= MAX and period >= 1
    and period <= MAX_PERIOD and burst >= 1 and burst <= MAX and cost >= 1 and cost <= MAX and max_wait <= MAX
    and (now and now <= MAX or ARGV[6] == '')) then
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
  max_wait, err = h.int_arg(5, 'max_wait', 0, MAX)
  if err then return h.bad(err) end
  now, err = h.int_arg(6, 'now', 0, MAX, true)
  if err then return h.bad(err) end
end
local g, m = limit, period
while m > 0 do
  local r = g % m
  g, m = m, r
end
limit, period = limit / g, period / g
local bp = burst * period
if bp > MAX then
  local h = lib()
  return h.bad('burst*period/gcd(limit, period) must not exceed ' .. h.fmt(MAX))
end
if not now then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end

local key = KEYS[1]
local v = redis.pcall('GET', key)
local tat, rem = now, 0
local wl, wp = limit, period -- the rate TAT was written under, as in gcra
if type(v) == 'string' then
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

if cost > burst then
  return {0, -1, 0, 0, 0}
end
-- As in gcra: until the next admission, TAT - now counts in intervals of
-- the rate it was written under.
local room = MAX
if burst - cost <= floor(MAX / wp) then
  room = (burst - cost) * wp
end
local wait = tat - now - floor((room - rem) / wl)
if wait < 0 then
  wait = 0
end
if wait > max_wait then
  return {0, wait, 0, 0, 0}
end
if wl == limit and wp == period then
  local cp = cost * period
  local q = floor(cp / limit)
  tat, rem = tat + q, rem + cp - q * limit
  if rem >= limit then
    tat, rem = tat + 1, rem - limit
  end
else
  -- Booked under another rate: at the moment it conforms, the intervals
  -- TAT stands ahead, rounded up to whole ones, and cost, at this rate.
  local at = now + wait
  local ahead = 0
  if tat > at or (tat == at and rem > 0) then
    ahead = -floor(-((tat - at) * wl + rem) / wp)
  end
  local cp = (ahead + cost) * period
  local q = floor(cp / limit)
  tat, rem = at + q, cp - q * limit
end
local life = tat - now
if rem > 0 then
  life = life + 1
end
local ms = floor((life + 999) / 1000)
if ms < 2 then
  ms = 2
end
redis.call('SET', key, format('%d:%d:%d:%d', tat, rem, limit, period), 'PX', format('%d', ms))
return {1, wait, now + wait, tat, rem}