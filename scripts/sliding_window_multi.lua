-- SlidingWindowMulti checks several sliding-window-counter limits on one
-- identity (say 10 per second AND 1000 per hour) and charges all of them or
-- none: a request is allowed iff every limit admits it, and only then is
-- cost counted in every limit. Each limit has its own key holding exactly
-- the state the sliding_window script keeps, so a limit checked alone
-- (sliding_window) or with others (sliding_window_multi, in any order)
-- spends one quota; on its key, each limit decides exactly as
-- sliding_window with the same limit and period.
--
-- remaining is the smallest remaining over the limits; retry_after is 0
-- when allowed, -1 when cost exceeds some limit, else the largest
-- retry_after over the limits (the first moment all of them admit: each
-- estimate only falls while nothing is charged); reset_after is the largest
-- reset_after; limiting is the 1-based position of the limit (its key) that
-- decided: the first with the largest retry_after when denied (the first
-- too small when -1), the first with the smallest remaining when allowed. A
-- denied request and a cost of 0 change nothing. Times are in µs.
--
-- @script sliding_window_multi
-- @key states...      one hash {w, c, p} per limit, as the sliding_window script keeps it; 1 to 16 keys, all in one hash slot
-- @arg cost int       units this request takes from every limit, >= 0 (0 only reports)
-- @arg now int?       client clock in µs since the Unix epoch; Redis TIME when unset
-- @arg limits int...  limit and period (µs) of each key's limit, in the order of the keys: 2 numbers per key, bounds as in sliding_window
-- @return allowed bool
-- @return remaining int     largest cost admitted right after this decision
-- @return retry_after int   µs until the same cost is admitted; 0 if allowed, -1 if it never fits
-- @return reset_after int   µs until every limit's counts have left their windows
-- @return limiting int      1-based position of the limit (its key) that decided

-- State: each key as in sliding_window, {w, c, p}: the current window index,
-- its count and the previous window's count. Each key gets its own TTL, until
-- its own counts have left the sliding window, rounded up to whole ms and at
-- least 2 ms, whenever the request is admitted. Memory: one hash with three
-- fields per limit and identity.

-- Repair: a key found without TTL (PTTL -1) gets its TTL back on any call;
-- that is the only write a denied request or a cost of 0 can make.

local MAX = 4503599627370496 -- 2^52: integers up to here are exact in Lua numbers
local MAX_PERIOD = 1125899906842624 -- 2^50 µs, about 35 years

local function fmt(x)
  return string.format('%d', x)
end

local function bad(msg)
  return redis.error_reply('ERR sluice: sliding_window_multi: ' .. msg)
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

local n = #KEYS
if n < 1 or n > 16 then
  return bad('want 1 to 16 keys, one per limit, got ' .. fmt(n))
end
if #ARGV ~= 2 + 2 * n then
  local keys = 'keys'
  if n == 1 then
    keys = 'key'
  end
  return bad('want cost, now and 2 numbers (limit, period) per key: ' .. fmt(2 + 2 * n) .. ' arguments for ' .. fmt(n) .. ' ' .. keys .. ', got ' .. fmt(#ARGV))
end
local seen = {}
for i = 1, n do
  if seen[KEYS[i]] then
    return bad('key ' .. fmt(i) .. ' repeats key ' .. fmt(seen[KEYS[i]]))
  end
  seen[KEYS[i]] = i
end
local cost, err = int_arg(1, 'cost', 0, MAX)
if err then return bad(err) end
local now
now, err = int_arg(2, 'now', 0, MAX, true)
if err then return bad(err) end
local limits = {}
for i = 1, n do
  local at = 2 + 2 * (i - 1)
  local name = 'limit ' .. fmt(i) .. ': '
  local limit, period
  limit, err = int_arg(at + 1, name .. 'limit', 1, MAX)
  if err then return bad(err) end
  period, err = int_arg(at + 2, name .. 'period', 1, MAX_PERIOD)
  if err then return bad(err) end
  if limit * period > MAX then
    return bad(name .. 'limit*period must not exceed ' .. fmt(MAX))
  end
  limits[i] = {key = KEYS[i], limit = limit, period = period}
end
if now == nil then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- Evaluate every limit as sliding_window does on its key.
local allowed, retry, limiting = 1, 0, 0
for i, s in ipairs(limits) do
  local period = s.period
  local st = redis.call('HMGET', s.key, 'w', 'c', 'p')
  local sw, sc, sp = tonumber(st[1] or ''), tonumber(st[2] or ''), tonumber(st[3] or '')
  s.found = st[1] and true
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
  s.win, s.cur, s.prev, s.e, s.skew = win, cur, prev, e, at - now
  if cost > s.limit then
    if retry ~= -1 then
      retry, limiting = -1, i
    end
    allowed = 0
  elseif prev * (period - e) + (cur + cost) * period > s.limit * period then
    allowed = 0
    -- Still in this window: prev*(period-e-w) <= (limit-cur-cost)*period.
    local free = (s.limit - cur - cost) * period
    local w
    if prev > 0 and free >= prev then
      w = period - e - divmod(free, prev)
    else
      -- In the next window prev' = cur and cur' = 0, at e' = w - (period - e):
      -- cur*(period-e') + cost*period <= limit*period.
      local e2 = 0
      if cur > 0 then
        e2 = period - divmod((s.limit - cost) * period, cur)
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
    w = w + s.skew
    if retry ~= -1 and w > retry then
      retry, limiting = w, i
    end
  end
end

-- Charge every limit when all of them admit; reply and set each key's TTL.
local wrote = allowed == 1 and cost > 0
local remaining, reset = -1, 0
for i, s in ipairs(limits) do
  local period, e = s.period, s.e
  if wrote then
    s.cur = s.cur + cost
    redis.call('HSET', s.key, 'w', fmt(s.win), 'c', fmt(s.cur), 'p', fmt(s.prev))
  end
  local r = 0
  local room = s.limit * period - s.prev * (period - e) - s.cur * period
  if room > 0 then
    r = divmod(room, period)
  end
  if remaining == -1 or r < remaining then
    remaining = r
    if allowed == 1 then
      limiting = i
    end
  end
  local life = 0 -- until both counts have left the window
  if s.cur > 0 then
    life = 2 * period - e + s.skew
  elseif s.prev > 0 then
    life = period - e + s.skew
  end
  if life > reset then
    reset = life
  end
  if wrote then
    expire_in(s.key, life)
  elseif s.found and redis.call('PTTL', s.key) == -1 then
    expire_in(s.key, life) -- repair a key found without TTL
  end
end
return {allowed, remaining, retry, reset, limiting}