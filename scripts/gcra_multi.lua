-- GCRAMulti checks several GCRA limits on one identity (say 10 per second
-- AND 1000 per hour) and charges all of them or none: a request is allowed
-- iff every limit admits it, and only then is cost taken from every limit.
-- Each limit has its own key holding exactly the state the gcra script
-- keeps, so a limit checked alone (gcra) or with others (gcra_multi, in any
-- order) spends one quota; on its key, each limit decides exactly as gcra
-- with the same limit, period and burst.
--
-- remaining is the smallest remaining over the limits; retry_after is 0
-- when allowed, -1 when cost exceeds some burst, else the largest
-- retry_after over the limits (the first moment all of them admit);
-- reset_after is the largest reset_after; limiting is the 1-based position
-- of the limit (its key) that decided: the first with the largest
-- retry_after when denied (the first too small when -1), the first with the
-- smallest remaining when allowed. A denied request and a cost of 0 change
-- nothing. Times are in µs.
--
-- @script gcra_multi
-- @key states...      one string "tat:r:l:p" per limit, as the gcra script keeps it; 1 to 16 keys, all in one hash slot
-- @arg cost int       units this request takes from every limit, >= 0 (0 only reports)
-- @arg now int?       client clock in µs since the Unix epoch; Redis TIME when unset
-- @arg each bool?     also reply every limit's own remaining, retry_after and reset_after (per_limit)
-- @arg limits int...  limit, period (µs) and burst of each key's limit, in the order of the keys: 3 numbers per key, bounds as in gcra
-- @return allowed bool
-- @return remaining int     largest cost admitted right after this decision
-- @return retry_after int   µs until the same cost is admitted; 0 if allowed, -1 if it never fits
-- @return reset_after int   µs until every limit's state is empty
-- @return limiting int      1-based position of the limit (its key) that decided
-- @return per_limit int...  with each: remaining, retry_after and reset_after of every limit, in the order of the keys

-- State: each key as in gcra, "tat:r:l:p": TAT as whole µs plus a
-- remainder r in 1/l µs, written under the rate l/p (limit/period in
-- lowest terms), which a changed limit reads as gcra does. Each key gets
-- its own TTL, until its own TAT, rounded up to whole ms and at least 2 ms,
-- written with its value by SET ... PX whenever the request is admitted.
-- Memory: one string of at most 67 bytes per limit and identity. Exactness
-- as in gcra.

-- Cost per decision: one MGET of all keys, then a SET ... PX per key when
-- the request is charged, else a PTTL per key that exists (TIME first when
-- now is unset).

-- Repair: as in gcra, a key found without TTL (PTTL -1) gets it back on
-- any call; that is the only write a denied request or a cost of 0 can
-- make.

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
    return redis.error_reply('ERR sluice: gcra_multi: ' .. msg)
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
if #ARGV ~= 3 + 3 * n then
  local h = lib()
  local keys = 'keys'
  if n == 1 then
    keys = 'key'
  end
  return h.bad('want cost, now, each and 3 numbers (limit, period, burst) per key: ' .. h.fmt(3 + 3 * n) .. ' arguments for ' .. h.fmt(n) .. ' ' .. keys .. ', got ' .. h.fmt(#ARGV))
end
-- KEYS and ARGV are globals: locals read them without a lookup each.
local keys, argv = KEYS, ARGV
for i = 2, n do
  local k = keys[i]
  for j = 1, i - 1 do
    if k == keys[j] then
      local h = lib()
      return h.bad('key ' .. h.fmt(i) .. ' repeats key ' .. h.fmt(j))
    end
  end
end

-- Arguments: the usual ARGV (each empty or decimal digits, every number in
-- range) passes one check; anything else goes through int_arg, which
-- accepts the same values and names the first bad one. Each limit's T =
-- period/limit is used in lowest terms p/l, as in gcra: lim[i] = l, per[i]
-- = p, bp[i] = burst*p.
local cost, now, each = tonumber(argv[1]), tonumber(argv[2]), argv[3]
local ok = find(table.concat(argv), '^%d+$') and cost and cost <= MAX and (now and now <= MAX or argv[2] == '')
  and (each == '' or each == '0' or each == '1')
local lim, per, bur, bp = {}, {}, {}, {}
for i = 1, n do
  if not ok then
    break
  end
  local limit, period, burst = tonumber(argv[3 * i + 1]), tonumber(argv[3 * i + 2]), tonumber(argv[3 * i + 3])
  ok = limit and period and burst and limit >= 1 and limit <= MAX and period >= 1 and period <= MAX_PERIOD
    and burst >= 1 and burst <= MAX
  if ok then
    -- (a % b is exact: both are integers below 2^53; see gcra.)
    local g, m = limit, period
    while m > 0 do
      local r = g % m
      g, m = m, r
    end
    lim[i], per[i], bur[i], bp[i] = limit / g, period / g, burst, burst * (period / g)
    ok = bp[i] <= MAX
  end
end
if not ok then
  local h = lib()
  local err
  cost, err = h.int_arg(1, 'cost', 0, MAX)
  if err then return h.bad(err) end
  now, err = h.int_arg(2, 'now', 0, MAX, true)
  if err then return h.bad(err) end
  each = argv[3]
  if each ~= '' and each ~= '0' and each ~= '1' then
    return h.bad('each must be 1, 0 or empty, got "' .. string.sub(each, 1, 24) .. '"')
  end
  for i = 1, n do
    local at = 3 + 3 * (i - 1)
    local name = 'limit ' .. h.fmt(i) .. ': '
    local limit, period, burst
    limit, err = h.int_arg(at + 1, name .. 'limit', 1, MAX)
    if err then return h.bad(err) end
    period, err = h.int_arg(at + 2, name .. 'period', 1, MAX_PERIOD)
    if err then return h.bad(err) end
    burst, err = h.int_arg(at + 3, name .. 'burst', 1, MAX)
    if err then return h.bad(err) end
    local g = h.gcd(limit, period)
    if burst * (period / g) > MAX then
      return h.bad(name .. 'burst*period/gcd(limit, period) must not exceed ' .. h.fmt(MAX))
    end
    lim[i], per[i], bur[i], bp[i] = limit / g, period / g, burst, burst * (period / g)
  end
end
each = each == '1'
if not now then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end

-- Evaluate every limit as gcra does on its key; one MGET reads them all (a
-- key of another type reads as missing, as in gcra).
local vals = redis.call('MGET', unpack(keys))
local tat, rem, wl, wp, waits = {}, {}, {}, {}, {}
local allowed, retry, limiting = 1, 0, 0
for i = 1, n do
  local limit, period, burst = lim[i], per[i], bur[i]
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
  if cost > burst then
    if retry ~= -1 then
      retry, limiting = -1, i
    end
    allowed = 0
  else
    -- As in gcra: TAT - now counts in intervals of the rate it was written
    -- under until the next admission.
    local room = MAX
    if burst - cost <= floor(MAX / p) then
      room = (burst - cost) * p
    end
    local wait = t - now - floor((room - r) / l)
    if wait > 0 and cost > 0 then
      allowed = 0
      waits[i] = wait
      if retry ~= -1 and wait > retry then
        retry, limiting = wait, i
      end
    end
  end
end

-- Charge every limit when all of them admit; reply and set each key's TTL.
local wrote = allowed == 1 and cost > 0
local remaining, reset = -1, 0
local reply -- with each: the fixed elements, then 3 per limit
if each then
  reply = {0, 0, 0, 0, 0}
end
for i = 1, n do
  local limit, period = lim[i], per[i]
  local t, r, l, p = tat[i], rem[i], wl[i], wp[i]
  if wrote then
    if l == limit and p == period then
      local cp = cost * period
      local q = floor(cp / limit)
      t, r = t + q, r + cp - q * limit
      if r >= limit then
        t, r = t + 1, r - limit
      end
    else
      -- The first admission under another rate, as in gcra.
      local cp = (-floor(-((t - now) * l + r) / p) + cost) * period
      local q = floor(cp / limit)
      t, r = now + q, cp - q * limit
    end
    l, p = limit, period
  end
  local d = t - now
  local rm = 0
  if d <= floor((MAX - r) / l) then
    rm = bur[i] + floor(-(d * l + r) / p)
    if rm < 0 then
      rm = 0
    end
  end
  if remaining == -1 or rm < remaining then
    remaining = rm
    if allowed == 1 then
      limiting = i
    end
  end
  local life = d -- until TAT, rounded up to whole µs
  if r > 0 then
    life = d + 1
  end
  if life > reset then
    reset = life
  end
  if each then
    -- This limit's own wait, from its state before the call (a charge
    -- means every limit admitted: no wait).
    local w = 0
    if cost > bur[i] then
      w = -1
    elseif allowed == 0 then
      w = waits[i] or 0
    end
    reply[3 * i + 3], reply[3 * i + 4], reply[3 * i + 5] = rm, w, life
  end
  if wrote then
    -- The TTL goes with the value: until TAT, in whole ms, at least 2 ms.
    local ms = floor((life + 999) / 1000)
    if ms < 2 then
      ms = 2
    end
    redis.call('SET', keys[i], format('%d:%d:%d:%d', t, r, limit, period), 'PX', format('%d', ms))
  elseif vals[i] and redis.call('PTTL', keys[i]) == -1 then
    lib().expire_in(keys[i], life) -- repair a key found without TTL
  end
end
if each then
  reply[1], reply[2], reply[3], reply[4], reply[5] = allowed, remaining, retry, reset, limiting
  return reply
end
return {allowed, remaining, retry, reset, limiting}