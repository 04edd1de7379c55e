-- Refund gives back the charges a batch decision made for one identity
-- when another check of the batch denied: a denied batch must leave no
-- charge. Each key's charge is undone by its algorithm's inverse, and only
-- as far as that can never admit more than if the charge had not been made
-- (never over-admission), whatever other requests did to the key between
-- the charge and the refund:
--
-- gcra, token_bucket: the state moves back by the charge's emission
-- (cost*period/limit), less what the time between the charge and the
-- refund may have absorbed: since the charge's reply said its state was
-- reset_after µs from full, and since precedes the charge, the refund
-- gives back min(cost*T, reset_after - 1µs - (now - since)). A key charged
-- while far from empty gets back its whole charge; one charged while empty
-- keeps at most 1µs plus the time from since to the charge.
-- fixed_window: the charge's window is the one whose end is reset_after
-- after the charge, which since bounds; its count is lowered by cost if
-- the key still counts that window. A window that ended meanwhile has
-- nothing to give back.
-- sliding_window: likewise, from the current count, or from the previous
-- count once the key has moved on one window.
-- sliding_log: of the members logged at or after since, the oldest of the
-- charge's cost is removed (the charge's own, or one logged before it,
-- whose removal leaves the later member in the window), and the running
-- totals of the members after it are lowered by its cost.
--
-- A key that is missing, of another type or of another form has nothing to
-- give back; nor has one written under other numbers than the charge's (the
-- limit changed between the charge and the refund: another rate for gcra
-- and token_bucket, another period for fixed_window and sliding_window).
-- Times are in µs.
--
-- @script refund
-- @key states...      the keys charged, 1 to 16, all in one hash slot
-- @arg since int      a time at or before every charge being given back: a TIME sent ahead of them, or the client clock they used
-- @arg now int?       client clock in µs since the Unix epoch; Redis TIME when unset
-- @arg charges int... 6 numbers per key: algorithm (1 fixed_window, 2 sliding_log, 3 sliding_window, 4 token_bucket, 5 gcra), limit, period (µs), burst (0 unless token_bucket or gcra), cost, and the reset_after of the charge's reply
-- @return changed int       the keys whose state the refund changed

-- State: each key as its algorithm's script keeps it, with the TTL that
-- script would give the state written; a state the refund empties is
-- deleted.

-- Cost per key: GET and SET ... PX (or DEL); for sliding_log a
-- ZRANGEBYSCORE of the members logged since, and a ZREM and ZADD for each
-- member renumbered.

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
    return redis.error_reply('ERR sluice: refund: ' .. msg)
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
  return h.bad('want 1 to 16 keys, got ' .. h.fmt(n))
end
if #ARGV ~= 2 + 6 * n then
  local h = lib()
  return h.bad('want since, now and 6 numbers per key: ' .. h.fmt(2 + 6 * n) .. ' arguments for ' .. h.fmt(n) .. ' keys, got ' .. h.fmt(#ARGV))
end
local since, now = tonumber(ARGV[1]), tonumber(ARGV[2])
if not (find(table.concat(ARGV), '^%d+$') and since and since <= MAX and (now and now <= MAX or ARGV[2] == '')) then
  local h = lib()
  local err
  since, err = h.int_arg(1, 'since', 0, MAX)
  if err then return h.bad(err) end
  now, err = h.int_arg(2, 'now', 0, MAX, true)
  if err then return h.bad(err) end
  for i = 3, #ARGV do
    local _, e = h.int_arg(i, 'argument ' .. h.fmt(i), 0, MAX)
    if e then return h.bad(e) end
  end
end
for i = 1, n do
  local at = 2 + 6 * (i - 1)
  local alg, limit, period, burst = tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2]), tonumber(ARGV[at + 3]), tonumber(ARGV[at + 4])
  if alg < 1 or alg > 5 or limit < 1 or period < 1 or period > MAX_PERIOD or ((alg == 4 or alg == 5) and burst < 1) then
    local h = lib()
    return h.bad('key ' .. h.fmt(i) .. ': want an algorithm 1 to 5, limit >= 1, period 1 to ' .. h.fmt(MAX_PERIOD) .. ' and, for token_bucket and gcra, burst >= 1')
  end
end
if not now then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end
local delta = now - since
if delta < 0 then
  delta = 0
end

-- lowest returns limit and period divided by their gcd.
local function lowest(limit, period)
  local g, m = limit, period
  while m > 0 do
    local r = g % m
    g, m = m, r
  end
  return limit / g, period / g
end

-- put writes val to key for life µs (rounded up to whole ms, at least 2
-- ms), or deletes key when life is over.
local function put(key, val, life)
  if life <= 0 then
    redis.call('DEL', key)
    return
  end
  local ms = floor((life + 999) / 1000)
  if ms < 2 then
    ms = 2
  end
  redis.call('SET', key, val, 'PX', format('%d', ms))
end

-- back is how much of an emission of cost*period (in 1/limit µs) is given
-- back for a charge whose reply said reset_after.
local function back(limit, period, cost, reset)
  local u = cost * period
  local bound = (reset - 1 - delta) * limit
  if bound < u then
    u = bound
  end
  return u
end

local function gcra(key, limit, period, cost, reset)
  limit, period = lowest(limit, period)
  local v = redis.pcall('GET', key)
  if type(v) ~= 'string' then
    return false
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
  -- charge) has nothing known to give back.
  if not (st and sr and st % 1 == 0 and st <= 2 * MAX and sl == limit and sp == period and sr < limit) then
    return false
  end
  local u = back(limit, period, cost, reset)
  if u <= 0 or st < now or (st == now and sr == 0) then
    return false -- nothing to give back, or the state is empty already
  end
  local q = floor(u / limit)
  st, sr = st - q, sr - (u - q * limit)
  if sr < 0 then
    st, sr = st - 1, sr + limit
  end
  local life = st - now
  if sr > 0 then
    life = life + 1
  end
  put(key, format('%d:%d:%d:%d', st, sr, limit, period), life)
  return true
end

local function token_bucket(key, limit, period, burst, cost, reset)
  limit, period = lowest(limit, period)
  local v = redis.pcall('GET', key)
  if type(v) ~= 'string' then
    return false
  end
  local st, sd, sl, sp = string.match(v, '^(%d+):(%d+):(%d+):(%d+)$')
  st, sd, sl, sp = tonumber(st), tonumber(sd), tonumber(sl), tonumber(sp)
  if not st then
    st, sd = string.match(v, '^(%d+):(%d+)$')
    st, sd, sl, sp = tonumber(st), tonumber(sd), limit, period
    if sd then
      sd = burst * period - sd
    end
  end
  if not (st and sd and st <= 2 * MAX and sd <= MAX and sl == limit and sp == period) then
    return false -- another form, or written under another rate
  end
  -- What the bucket misses at at, in 1/period tokens.
  local at, miss = now, sd
  if st > now then
    at = st
  elseif now - st >= -floor(-sd / limit) then
    miss = 0
  else
    miss = sd - (now - st) * limit
  end
  local u = back(limit, period, cost, reset)
  if u <= 0 or miss <= 0 then
    return false
  end
  miss = miss - u
  if miss <= 0 then
    redis.call('DEL', key) -- full: the same as a missing key
  else
    put(key, format('%d:%d:%d:%d', at, miss, limit, period), at - now - floor(-miss / limit))
  end
  return true
end

-- window is the index w of the window a windowed charge went to, found
-- from its reply's reset_after: (w + ends) * period is reset_after after
-- the charge, and the charge came between since and now; nil when two
-- windows fit.
local function window(period, reset, ends)
  local hi = floor((now + reset) / period)
  if hi * period < since + reset or (hi - 1) * period >= since + reset then
    return nil
  end
  return hi - ends
end

local function fixed_window(key, period, cost, reset)
  local w = window(period, reset, 1)
  local v = redis.pcall('GET', key)
  if not w or type(v) ~= 'string' then
    return false
  end
  local st, sn, sp = string.match(v, '^(%d+):(%d+):(%d+)$')
  st, sn, sp = tonumber(st), tonumber(sn), tonumber(sp)
  if not st then
    st, sn = string.match(v, '^(%d+):(%d+)$')
    st, sn, sp = tonumber(st), tonumber(sn), period
    if st then
      st = st * period
    end
  end
  if not (st and sn and sp == period and floor(st / period) == w and sn >= cost) then
    return false
  end
  sn = sn - cost
  if sn == 0 then
    redis.call('DEL', key)
  else
    put(key, format('%d:%d:%d', st, sn, period), (w + 1) * period - now)
  end
  return true
end

local function sliding_window(key, period, cost, reset)
  local w = window(period, reset, 2)
  local v = redis.pcall('GET', key)
  if not w or type(v) ~= 'string' then
    return false
  end
  local st, sc, sp, sd = string.match(v, '^(%d+):(%d+):(%d+):(%d+)$')
  st, sc, sp, sd = tonumber(st), tonumber(sc), tonumber(sp), tonumber(sd)
  if not st then
    st, sc, sp = string.match(v, '^(%d+):(%d+):(%d+)$')
    st, sc, sp, sd = tonumber(st), tonumber(sc), tonumber(sp), period
    if st then
      st = st * period
    end
  end
  if not (st and sc and sp and sd == period) then
    return false -- another form, or counted under another period
  end
  local sw = floor(st / period)
  if sw == w and sc >= cost then
    sc = sc - cost
  elseif sw == w + 1 and sp >= cost then
    sp = sp - cost
  else
    return false
  end
  local life = 0
  if sc > 0 then
    life = (sw + 2) * period - now
  elseif sp > 0 then
    life = (sw + 1) * period - now
  end
  put(key, format('%d:%d:%d:%d', st, sc, sp, period), life)
  return true
end

local function sliding_log(key, period, cost)
  -- The members logged at or after since: the charge's among them, with
  -- any logged after it. The oldest of cost cost is removed (the charge's
  -- own, or one logged no later, which leaves the later one in the window:
  -- never more admitted), and the totals after it are lowered by cost, so
  -- the log counts as if that member had never been.
  local recent = redis.call('ZRANGEBYSCORE', key, format('%d', since), '+inf', 'WITHSCORES')
  local ttl = redis.call('PTTL', key)
  local at
  for j = 1, #recent, 2 do
    local total, c, rest = string.match(recent[j], '^(%d+):(%d+)(:?%d*)$')
    if not total or #total ~= 16 or rest == ':' then
      return false
    end
    if not at and tonumber(c) == cost then
      at = j
      redis.call('ZREM', key, recent[j])
    elseif at then
      -- Renamed in place, the new name first so that the set never
      -- empties: its total is below the old one and above every earlier
      -- member's, so no member has that name.
      redis.call('ZADD', key, recent[j + 1], format('%016d:%s%s', tonumber(total) - cost, c, rest))
      redis.call('ZREM', key, recent[j])
    end
  end
  if at then
    if ttl <= 0 then
      -- No TTL to keep (a key found without one): until the newest member
      -- leaves the window, as the sliding_log script gives it.
      local newest = redis.call('ZRANGE', key, '-1', '-1', 'WITHSCORES')
      ttl = 2
      if #newest == 2 then
        ttl = floor((tonumber(newest[2]) + period - now + 999) / 1000)
      end
      if ttl < 2 then
        ttl = 2
      end
    end
    redis.call('PEXPIRE', key, format('%d', ttl)) -- the log's TTL, as it was
  end
  return at ~= nil
end

local changed = 0
for i = 1, n do
  local at = 2 + 6 * (i - 1)
  local alg, limit, period, burst = tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2]), tonumber(ARGV[at + 3]), tonumber(ARGV[at + 4])
  local cost, reset = tonumber(ARGV[at + 5]), tonumber(ARGV[at + 6])
  local key = KEYS[i]
  local done = false
  if cost > 0 then
    if alg == 1 then
      done = fixed_window(key, period, cost, reset)
    elseif alg == 2 then
      done = sliding_log(key, period, cost)
    elseif alg == 3 then
      done = sliding_window(key, period, cost, reset)
    elseif alg == 4 then
      done = token_bucket(key, limit, period, burst, cost, reset)
    else
      done = gcra(key, limit, period, cost, reset)
    end
  end
  if done then
    changed = changed + 1
  end
end
return {changed}