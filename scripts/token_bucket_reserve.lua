-- TokenBucketReserve reserves cost tokens of a token-bucket limit for a
-- caller that will wait for them (Limiter.Reserve, Limiter.Wait): unlike
-- token_bucket, which admits only what the bucket holds now, it books the
-- cost at the first moment the bucket holds it, if that is at most max_wait
-- away, and takes the tokens then. The state is token_bucket's, on the same
-- key, so reservations and token_bucket's admissions spend one bucket.
--
-- What the bucket misses is known at a time at (now, or the moment of the
-- last reservation when that is ahead). A cost the bucket holds is taken at
-- once (delay 0); otherwise the reservation conforms when the refill from
-- at has made up what is missing, the delay token_bucket reports as
-- retry_after, and the state is written at that moment, the bucket then
-- missing the cost (the bucket is never fuller than full). A limit changed
-- since the state was written books as token_bucket admits: the bucket
-- refills at the rate it was written under until that moment, and what it
-- misses then is rounded up to whole tokens. Waiters on one identity are
-- served in the order of their reservations: each waits for the refill
-- after the last one's moment. A reservation not made (ok 0) changes
-- nothing; its delay is the wait it would have needed, -1 when cost >
-- burst. tat and rem are the state as a GCRA's TAT (the moment the bucket
-- is full again, as whole µs and a remainder in 1/l µs, l =
-- limit/gcd(limit, period)), for token_bucket_cancel. Times are in µs;
-- burst*period/gcd(limit, period) must not exceed 2^52.
--
-- @script token_bucket_reserve
-- @key state          string "t:d:l:p", as token_bucket keeps it
-- @arg limit int      tokens added per period, >= 1
-- @arg period int     refill period in µs, >= 1
-- @arg burst int      bucket capacity in tokens, >= 1
-- @arg cost int       tokens reserved, >= 1
-- @arg max_wait int   µs the caller will wait at most: a reservation that would conform later is not made
-- @arg now int?       client clock in µs since the Unix epoch; Redis TIME when unset
-- @return ok bool           the cost is reserved (taken from the bucket)
-- @return delay int         µs until the reservation conforms; when not ok, the wait it would need, -1 if it never fits
-- @return act_at int        µs since the epoch (the clock the script used) at which it conforms; 0 when not ok
-- @return tat int           the state written, as a TAT in whole µs; 0 when not ok
-- @return rem int           its remainder in 1/l µs

-- State, TTL and memory as in token_bucket: SET ... PX until the bucket is
-- full, rounded up to whole ms and at least 2 ms. A time written ahead is
-- the reservation: token_bucket refills from it on, so the tokens it took
-- are not there for anyone before it conforms.

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
    return redis.error_reply('ERR sluice: token_bucket_reserve: ' .. msg)
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
local cap = burst * period -- a full bucket, in 1/period tokens
if cap > MAX then
  local h = lib()
  return h.bad('burst*period/gcd(limit, period) must not exceed ' .. h.fmt(MAX))
end
if not now then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end

-- What the bucket misses at its time, read as token_bucket reads it.
local key = KEYS[1]
local v = redis.pcall('GET', key)
local at, miss = now, 0
local wl, wp = limit, period -- the rate it refills at
if type(v) == 'string' then
  local st, sd, sl, sp = string.match(v, '^(%d+):(%d+):(%d+):(%d+)$')
  st, sd, sl, sp = tonumber(st), tonumber(sd), tonumber(sl), tonumber(sp)
  if not st then
    st, sd = string.match(v, '^(%d+):(%d+)$')
    st, sd, sl, sp = tonumber(st), tonumber(sd), limit, period
    if sd then
      sd = cap - sd
      if sd < 0 then
        sd = 0
      end
    end
  end
  if st and sd and st <= 2 * MAX and sd <= MAX and sl >= 1 and sl <= MAX and sp >= 1 and sp <= MAX_PERIOD then
    wl, wp = sl, sp
    if st > now then
      at, miss = st, sd
    elseif now - st < -floor(-sd / sl) then
      miss = sd - (now - st) * sl
    end
  end
end

if cost > burst then
  return {0, -1, 0, 0, 0}
end
-- As in token_bucket: the bucket refills at the rate it was written under
-- until cost fits, ceil(miss/wp) + cost <= burst.
local wait = 0
local short = -floor(-miss / wp)
if short + cost > burst then
  local fill = -floor(((burst - cost) * wp - miss) / wl)
  wait = at - now + fill
  at, miss = at + fill, miss - fill * wl
  if miss < 0 then
    miss = 0
  end
  short = -floor(-miss / wp)
end
if wait > max_wait then
  return {0, wait, 0, 0, 0}
end
if wl == limit and wp == period then
  miss = miss + cost * period
else
  miss = (short + cost) * period -- booked under another rate, as token_bucket admits
end
local full = floor(miss / limit) -- µs from at until the bucket holds all but miss % limit
local rem = miss - full * limit
local life = at - now + full
if rem > 0 then
  life = life + 1
end
local ms = floor((life + 999) / 1000)
if ms < 2 then
  ms = 2
end
redis.call('SET', key, format('%d:%d:%d:%d', at, miss, limit, period), 'PX', format('%d', ms))
return {1, wait, now + wait, at + full, rem}