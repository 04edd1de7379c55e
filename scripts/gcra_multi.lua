-- GcraMulti checks several GCRA limits on one identity (say 10 per second
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
-- @key states...      one hash {tat, r} per limit, as the gcra script keeps it; 1 to 16 keys, all in one hash slot
-- @arg cost int       units this request takes from every limit, >= 0 (0 only reports)
-- @arg now int?       client clock in µs since the Unix epoch; Redis TIME when unset
-- @arg limits int...  limit, period (µs) and burst of each key's limit, in the order of the keys: 3 numbers per key, bounds as in gcra
-- @return allowed bool
-- @return remaining int     largest cost admitted right after this decision
-- @return retry_after int   µs until the same cost is admitted; 0 if allowed, -1 if it never fits
-- @return reset_after int   µs until every limit's state is empty
-- @return limiting int      1-based position of the limit (its key) that decided

-- State: each key as in gcra, {tat, r}: TAT as whole µs plus a remainder in
-- 1/l µs for T = period/limit in lowest terms p/l. Each key gets its own TTL,
-- until its own TAT, rounded up to whole ms and at least 2 ms, whenever the
-- request is admitted. Memory: one hash with two fields per limit and
-- identity. Exactness as in gcra.

-- Repair: a key found without TTL (PTTL -1) gets its TTL back on any call;
-- that is the only write a denied request or a cost of 0 can make.

local MAX = 4503599627370496 -- 2^52: integers up to here are exact in Lua numbers
local MAX_PERIOD = 1125899906842624 -- 2^50 µs, about 35 years

local function fmt(x)
  return string.format('%d', x)
end

local function bad(msg)
  return redis.error_reply('ERR sluice: gcra_multi: ' .. msg)
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
if #ARGV ~= 2 + 3 * n then
  local keys = 'keys'
  if n == 1 then
    keys = 'key'
  end
  return bad('want cost, now and 3 numbers (limit, period, burst) per key: ' .. fmt(2 + 3 * n) .. ' arguments for ' .. fmt(n) .. ' ' .. keys .. ', got ' .. fmt(#ARGV))
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
  local at = 2 + 3 * (i - 1)
  local name = 'limit ' .. fmt(i) .. ': '
  local limit, period, burst
  limit, err = int_arg(at + 1, name .. 'limit', 1, MAX)
  if err then return bad(err) end
  period, err = int_arg(at + 2, name .. 'period', 1, MAX_PERIOD)
  if err then return bad(err) end
  burst, err = int_arg(at + 3, name .. 'burst', 1, MAX)
  if err then return bad(err) end
  -- T = period/limit in lowest terms, as in gcra.
  local g = gcd(limit, period)
  limit, period = limit / g, period / g
  if burst * period > MAX then
    return bad(name .. 'burst*period/gcd(limit, period) must not exceed ' .. fmt(MAX))
  end
  limits[i] = {key = KEYS[i], limit = limit, period = period, burst = burst, bp = burst * period}
end
if now == nil then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- Evaluate every limit as gcra does on its key.
local allowed, retry, limiting = 1, 0, 0
for i, s in ipairs(limits) do
  local st = redis.call('HMGET', s.key, 'tat', 'r')
  local stat, sr = tonumber(st[1] or ''), tonumber(st[2] or '')
  s.found = st[1] and true
  local tat, rem = now, 0
  if stat and sr then
    if sr >= s.limit then
      stat, sr = stat + 1, 0 -- limit lowered since the write: round TAT up
    elseif sr < 0 then
      sr = 0
    end
    if stat > now or (stat == now and sr > 0) then
      tat, rem = stat, sr
    end
  end
  s.tat, s.rem = tat, rem
  if cost > s.burst then
    if retry ~= -1 then
      retry, limiting = -1, i
    end
    allowed = 0
  else
    local room = s.bp - cost * s.period - rem
    if not (room >= 0 and tat - now <= divmod(room, s.limit)) then
      allowed = 0
      local w = tat - now + ceildiv(rem + cost * s.period - s.bp, s.limit)
      if retry ~= -1 and w > retry then
        retry, limiting = w, i
      end
    end
  end
end

-- Charge every limit when all of them admit; reply and set each key's TTL.
local wrote = allowed == 1 and cost > 0
local remaining, reset = -1, 0
for i, s in ipairs(limits) do
  if wrote then
    local q, m = divmod(cost * s.period, s.limit)
    s.tat, s.rem = s.tat + q, s.rem + m
    if s.rem >= s.limit then
      s.tat, s.rem = s.tat + 1, s.rem - s.limit
    end
    redis.call('HSET', s.key, 'tat', fmt(s.tat), 'r', fmt(s.rem))
  end
  local r = 0
  local d = s.tat - now
  local free = s.bp - s.rem
  if free >= 0 and d <= divmod(free, s.limit) then
    r = divmod(free - d * s.limit, s.period)
  end
  if remaining == -1 or r < remaining then
    remaining = r
    if allowed == 1 then
      limiting = i
    end
  end
  local life = d -- until TAT, rounded up to whole µs
  if s.rem > 0 then
    life = d + 1
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