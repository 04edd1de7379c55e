-- GCRAReserveMulti reserves on several GCRA limits of one identity at once
-- (say 500 requests and 200,000 tokens per minute of an upstream API), all
-- or nothing: the reservation conforms at the first moment every limit
-- admits its cost, if that is at most max_wait away, and each limit books
-- its cost at that common moment, as an arrival then (TAT moves to
-- max(TAT, moment) + cost*T). The state of each key is gcra's, so the
-- limits are the ones Allow, gcra_reserve and gcra_multi use.
--
-- delay is the time until the common moment (0: now); when not ok, the
-- wait it would need, or -1 when a cost exceeds its burst. states lists,
-- comma-separated in key order, the "tat:rem" each key was written (for
-- gcra_cancel, key by key). Times are in µs.
--
-- @script gcra_reserve_multi
-- @key states...      one string "tat:r:l:p" per limit, as gcra keeps it; 1 to 16 keys, all in one hash slot
-- @arg max_wait int   µs the caller will wait at most
-- @arg now int?       client clock in µs since the Unix epoch; Redis TIME when unset
-- @arg limits int...  limit, period (µs), burst and cost of each key's limit, in the order of the keys: 4 numbers per key
-- @return ok bool           every cost is reserved (charged)
-- @return delay int         µs until the reservation conforms; when not ok, the wait it would need, -1 if a cost never fits
-- @return act_at int        µs since the epoch (the clock the script used) at which it conforms; 0 when not ok
-- @return states string     "tat:rem" of every key as written, comma-separated in key order; "" when not ok

-- State, TTL and memory as in gcra, key by key; a limit changed since its
-- key was written books as gcra_reserve does.

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
    return redis.error_reply('ERR sluice: gcra_reserve_multi: ' .. msg)
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

local n = #KEYS
if n < 1 or n > 16 then
  local h = lib()
  return h.bad('want 1 to 16 keys, one per limit, got ' .. h.fmt(n))
end
if #ARGV ~= 2 + 4 * n then
  local h = lib()
  return h.bad('want max_wait, now and 4 numbers (limit, period, burst, cost) per key: ' .. h.fmt(2 + 4 * n) .. ' arguments for ' .. h.fmt(n) .. ' keys, got ' .. h.fmt(#ARGV))
end
local max_wait, now = tonumber(ARGV[1]), tonumber(ARGV[2])
if not (find(table.concat(ARGV), '^%d+$') and max_wait and max_wait <= MAX and (now and now <= MAX or ARGV[2] == '')) then
  local h = lib()
  local err
  max_wait, err = h.int_arg(1, 'max_wait', 0, MAX)
  if err then return h.bad(err) end
  now, err = h.int_arg(2, 'now', 0, MAX, true)
  if err then return h.bad(err) end
  for i = 3, #ARGV do
    local _, e = h.int_arg(i, 'argument ' .. h.fmt(i), 0, MAX)
    if e then return h.bad(e) end
  end
end
local lim, per, bur, cst = {}, {}, {}, {}
for i = 1, n do
  local at = 2 + 4 * (i - 1)
  local limit, period, burst, cost = tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2]), tonumber(ARGV[at + 3]), tonumber(ARGV[at + 4])
  if limit < 1 or period < 1 or period > MAX_PERIOD or burst < 1 or cost < 1 then
    local h = lib()
    return h.bad('limit ' .. h.fmt(i) .. ': want limit >= 1, period 1 to ' .. h.fmt(MAX_PERIOD) .. ', burst >= 1 and cost >= 1')
  end
  local g, m = limit, period
  while m > 0 do
    local r = g % m
    g, m = m, r
  end
  lim[i], per[i], bur[i], cst[i] = limit / g, period / g, burst, cost
  if burst * per[i] > MAX then
    local h = lib()
    return h.bad('limit ' .. h.fmt(i) .. ': burst*period/gcd(limit, period) must not exceed ' .. h.fmt(MAX))
  end
end
if not now then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end

-- Each limit's TAT (never earlier than now) and the first µs it admits
-- its cost; the common moment is the latest of those.
local vals = redis.call('MGET', unpack(KEYS))
local tat, rem, wl, wp = {}, {}, {}, {}
local moment = now
for i = 1, n do
  local limit, period = lim[i], per[i]
  local t, r, l, p = now, 0, limit, period
  local v = vals[i]
  if v then
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
      t, r, l, p = st, sr, sl, sp
    end
  end
  tat[i], rem[i], wl[i], wp[i] = t, r, l, p
  if cst[i] > bur[i] then
    return {0, -1, 0, ''}
  end
  -- As in gcra_reserve: in intervals of the rate TAT was written under.
  local room = MAX
  if bur[i] - cst[i] <= floor(MAX / p) then
    room = (bur[i] - cst[i]) * p
  end
  local conform = t - floor((room - r) / l)
  if conform > moment then
    moment = conform
  end
end
local delay = moment - now
if delay > max_wait then
  return {0, delay, 0, ''}
end

-- Book every limit at the moment.
local out = {}
for i = 1, n do
  local limit, period = lim[i], per[i]
  local t, r, l, p = tat[i], rem[i], wl[i], wp[i]
  local cp = cst[i] * per[i]
  if l == limit and p == period then
    if t < moment then
      t, r = moment, 0
    end
    local q = floor(cp / limit)
    t, r = t + q, r + cp - q * limit
    if r >= limit then
      t, r = t + 1, r - limit
    end
  else
    -- Booked under another rate, as in gcra_reserve.
    local ahead = 0
    if t > moment or (t == moment and r > 0) then
      ahead = -floor(-((t - moment) * l + r) / p)
    end
    cp = (ahead + cst[i]) * period
    local q = floor(cp / limit)
    t, r = moment + q, cp - q * limit
  end
  local life = t - now
  if r > 0 then
    life = life + 1
  end
  local ms = floor((life + 999) / 1000)
  if ms < 2 then
    ms = 2
  end
  redis.call('SET', KEYS[i], format('%d:%d:%d:%d', t, r, limit, period), 'PX', format('%d', ms))
  out[i] = format('%d:%d', t, r)
end
return {1, delay, moment, table.concat(out, ',')}