-- SlidingWindow checks and charges a sliding-window-counter limit: the
-- count of the previous epoch-aligned window is weighted by how much of it
-- still overlaps the sliding window. With e the time elapsed in the current
-- window [k*period, (k+1)*period), a request is allowed iff
-- prev*(period-e)/period + cur + cost <= limit, compared exactly in
-- integers as prev*(period-e) + (cur+cost)*period <= limit*period.
--
-- remaining is the largest cost admitted right after this decision;
-- retry_after is 0 when allowed, -1 when cost > limit, else the exact time
-- until the same cost is admitted; reset_after is the time until both
-- counts have left the window. A denied request, a cost of 0 and a peek
-- change nothing. Times are in µs; limit*period must not exceed 2^52.
--
-- @script sliding_window
-- @key state          hash {w = current window index, c = its count, p = the previous window's count}
-- @arg limit int      units admitted per period, >= 1
-- @arg period int     window length in µs, >= 1
-- @arg cost int       units this request takes, >= 0 (0 only reports)
-- @arg now int?       client clock in µs since the Unix epoch; Redis TIME when unset
-- @arg peek bool?     decide as for cost and reply as if charged, but write nothing (Limiter.Peek)
-- @return allowed bool
-- @return remaining int     largest cost admitted right after this decision
-- @return retry_after int   µs until the same cost is admitted; 0 if allowed, -1 if it never fits
-- @return reset_after int   µs until both counts have left the window

-- State: the window index is stored with the counts, so a stale key is read
-- as empty whatever its TTL. A window index ahead of the caller's clock
-- (another client's clock runs ahead) is used as if the caller were at that
-- window's start: the estimate then weighs the previous window fully, which
-- never admits more. TTL: until the current window's count has left the
-- sliding window, that is the end of the next window, rounded up to whole ms
-- and at least 2 ms.
-- Memory: one hash with three fields per identity.

-- Repair: a key found without TTL (PTTL -1) gets its TTL back on any call;
-- that is the only write a denied request or a cost of 0 can make.

local MAX = 4503599627370496 -- 2^52: integers up to here are exact in Lua numbers
local MAX_PERIOD = 1125899906842624 -- 2^50 µs, about 35 years

local function fmt(x)
  return string.format('%d', x)
end

local function bad(msg)
  return redis.error_reply('ERR sluice: sliding_window: ' .. msg)
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
local period
period, err = int_arg(2, 'period', 1, MAX_PERIOD)
if err then return bad(err) end
if limit * period > MAX then
  return bad('limit*period must not exceed ' .. fmt(MAX))
end
local cost
cost, err = int_arg(3, 'cost', 0, MAX)
if err then return bad(err) end
local now
now, err = int_arg(4, 'now', 0, MAX, true)
if err then return bad(err) end
local peek = ARGV[5]
if peek ~= nil and peek ~= '' and peek ~= '0' and peek ~= '1' then
  return bad('peek must be 1, 0 or empty, got "' .. string.sub(peek, 1, 24) .. '"')
end
peek = peek == '1'
if now == nil then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local key = KEYS[1]
local st = redis.call('HMGET', key, 'w', 'c', 'p')
local sw, sc, sp = tonumber(st[1] or ''), tonumber(st[2] or ''), tonumber(st[3] or '')

local win = divmod(now, period)
local at = now -- the time the decision is made at (later than now only when the state is ahead)
local cur, prev = 0, 0
if sw and sc and sp then
  if sw > win then
    win = sw
    at = win * period
  end
  if sw == win then
    cur, prev = sc, sp
  elseif sw == win - 1 then
    prev = sc
  end
end
local e = at - win * period -- time elapsed in the current window
local skew = at - now
local lp = limit * period

local allowed, retry, wrote = 0, 0, false
if cost > limit then
  retry = -1
elseif prev * (period - e) + (cur + cost) * period <= lp then
  allowed = 1
  if cost > 0 then
    cur = cur + cost
    if not peek then
      redis.call('HSET', key, 'w', fmt(win), 'c', fmt(cur), 'p', fmt(prev))
      wrote = true
    end
  end
else
  -- Still in this window: prev*(period-e-w) <= (limit-cur-cost)*period.
  local free = (limit - cur - cost) * period
  local w
  if prev > 0 and free >= prev then
    w = period - e - divmod(free, prev)
  else
    -- In the next window prev' = cur and cur' = 0, at e' = w - (period - e):
    -- cur*(period-e') + cost*period <= lp.
    local e2 = 0
    if cur > 0 then
      e2 = period - divmod((limit - cost) * period, cur)
      if e2 < 0 then
        e2 = 0
      end
    end
    if e2 < period then
      w = period - e + e2
    else
      w = 2 * period - e -- both counts gone
    end
  end
  retry = w + skew
end

local remaining = 0
local room = lp - prev * (period - e) - cur * period
if room > 0 then
  remaining = divmod(room, period)
end
local reset = 0
if cur > 0 then
  reset = 2 * period - e + skew
elseif prev > 0 then
  reset = period - e + skew
end
if wrote then
  expire_in(key, reset)
elseif not peek and st[1] and redis.call('PTTL', key) == -1 then
  expire_in(key, reset) -- repair a key found without TTL
end
return {allowed, remaining, retry, reset}