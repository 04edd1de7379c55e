-- GcraMulti checks several GCRA limits on one identity (say 10 per second
-- AND 1000 per hour) and charges all of them or none: a request is allowed
-- iff every limit admits it, and only then is cost taken from every limit.
-- Each limit behaves exactly as the gcra script with the same limit, period
-- and burst.
--
-- remaining is the smallest remaining over the limits; retry_after is 0
-- when allowed, -1 when cost exceeds some burst, else the largest
-- retry_after over the limits (the first moment all of them admit);
-- reset_after is the largest reset_after; limiting is the 1-based position
-- in limits of the limit that decided: the first with the largest
-- retry_after when denied (the first too small when -1), the first with the
-- smallest remaining when allowed. A denied request and a cost of 0 change
-- nothing. Times are in µs.
--
-- @script gcra_multi
-- @key state          hash: one field "limit:period:burst" per limit, holding "tat:r" as in gcra
-- @arg limits string  comma-separated limit:period:burst triples, e.g. "10:1000000:10,1000:3600000000:1000"; at most 16, no repeats
-- @arg cost int       units this request takes from every limit, >= 0 (0 only reports)
-- @arg now int?       client clock in µs since the Unix epoch; Redis TIME when unset
-- @return allowed bool
-- @return remaining int     largest cost admitted right after this decision
-- @return retry_after int   µs until the same cost is admitted; 0 if allowed, -1 if it never fits
-- @return reset_after int   µs until every limit's state is empty
-- @return limiting int      1-based position in limits of the limit that decided

-- State: fields are named by the normalized limit, so reordering the limits
-- keeps their state, and a changed limit starts afresh. When the script
-- writes, it also deletes fields of limits no longer given whose TAT has
-- passed; memory is one field per limit in use. TTL: until the latest TAT
-- of all fields, rounded up to whole ms. Exactness as in gcra.

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

-- parse_limits returns the limits as a list of {limit, period, burst, field},
-- or nil and a message.
local function parse_limits(s)
  if s == nil or s == '' then
    return nil, 'limits is required'
  end
  if #s > 1024 then
    return nil, 'limits is longer than 1024 bytes'
  end
  local out, seen = {}, {}
  for item in string.gmatch(s .. ',', '([^,]*),') do
    local n = #out + 1
    if n > 16 then
      return nil, 'at most 16 limits'
    end
    local a, b, c = string.match(item, '^(%d+):(%d+):(%d+)$')
    if not a or #a > 16 or #b > 16 or #c > 16 then
      return nil, 'limit ' .. fmt(n) .. ': want limit:period:burst as decimal integers, got "' .. string.sub(item, 1, 40) .. '"'
    end
    local l, p, bu = tonumber(a), tonumber(b), tonumber(c)
    local g = 1
    if l >= 1 and l <= MAX and p >= 1 and p <= MAX_PERIOD then
      g = gcd(l, p)
    end
    if l < 1 or l > MAX or p < 1 or p > MAX_PERIOD or bu < 1 or bu > MAX or bu * (p / g) > MAX then
      return nil, 'limit ' .. fmt(n) .. ': want limit >= 1, 1 <= period <= ' .. fmt(MAX_PERIOD) .. ', burst >= 1 and burst*period/gcd(limit, period) <= ' .. fmt(MAX) .. ', got "' .. item .. '"'
    end
    local field = fmt(l) .. ':' .. fmt(p) .. ':' .. fmt(bu)
    if seen[field] then
      return nil, 'limit ' .. fmt(n) .. ': ' .. field .. ' repeats limit ' .. fmt(seen[field])
    end
    seen[field] = n
    -- T = period/limit in lowest terms, as in gcra.
    out[n] = {limit = l / g, period = p / g, burst = bu, field = field}
  end
  return out, nil
end

-- parse_tat reads a field value "tat:r"; nil when malformed.
local function parse_tat(v)
  local a, b = string.match(v or '', '^(%d+):(%d+)$')
  if not a then
    return nil, nil
  end
  return tonumber(a), tonumber(b)
end

-- life is the time from now until TAT, rounded up to whole µs.
local function life(tat, rem, now)
  local d = tat - now
  if rem > 0 then
    d = d + 1
  end
  return d
end

local limits, err = parse_limits(ARGV[1])
if err then return bad(err) end
local cost
cost, err = int_arg(2, 'cost', 0, MAX)
if err then return bad(err) end
local now
now, err = int_arg(3, 'now', 0, MAX, true)
if err then return bad(err) end
if now == nil then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local key = KEYS[1]
local flat = redis.call('HGETALL', key)
local fields = {}
for i = 1, #flat, 2 do
  fields[flat[i]] = flat[i + 1]
end

-- Evaluate every limit as gcra does.
local allowed, retry, limiting = 1, 0, 0
for i, g in ipairs(limits) do
  local tat, rem = now, 0
  local stat, sr = parse_tat(fields[g.field])
  if stat then
    if sr >= g.limit then
      stat, sr = stat + 1, 0
    end
    if stat > now or (stat == now and sr > 0) then
      tat, rem = stat, sr
    end
  end
  g.tat, g.rem = tat, rem
  g.bp = g.burst * g.period
  if cost > g.burst then
    if retry ~= -1 then
      retry, limiting = -1, i
    end
    allowed = 0
  else
    local room = g.bp - cost * g.period - rem
    if not (room >= 0 and tat - now <= divmod(room, g.limit)) then
      allowed = 0
      local w = tat - now + ceildiv(rem + cost * g.period - g.bp, g.limit)
      if retry ~= -1 and w > retry then
        retry, limiting = w, i
      end
    end
  end
end

local wrote = false
if allowed == 1 and cost > 0 then
  local args = {}
  local current = {}
  for _, g in ipairs(limits) do
    local q, m = divmod(cost * g.period, g.limit)
    g.tat, g.rem = g.tat + q, g.rem + m
    if g.rem >= g.limit then
      g.tat, g.rem = g.tat + 1, g.rem - g.limit
    end
    args[#args + 1] = g.field
    args[#args + 1] = fmt(g.tat) .. ':' .. fmt(g.rem)
    current[g.field] = true
  end
  redis.call('HSET', key, unpack(args))
  -- Forget limits no longer given once their TAT has passed.
  for f, v in pairs(fields) do
    if not current[f] then
      local tat, rem = parse_tat(v)
      if not tat or life(tat, rem, now) <= 0 then
        redis.call('HDEL', key, f)
        fields[f] = nil
      end
    end
  end
  for _, g in ipairs(limits) do
    fields[g.field] = fmt(g.tat) .. ':' .. fmt(g.rem)
  end
  wrote = true
end

local remaining, reset = -1, 0
for i, g in ipairs(limits) do
  local r = 0
  local d = g.tat - now
  local free = g.bp - g.rem
  if free >= 0 and d <= divmod(free, g.limit) then
    r = divmod(free - d * g.limit, g.period)
  end
  if remaining == -1 or r < remaining then
    remaining = r
    if allowed == 1 then
      limiting = i
    end
  end
end
-- The key lives as long as its longest-lived field.
for _, v in pairs(fields) do
  local tat, rem = parse_tat(v)
  if tat then
    local l = life(tat, rem, now)
    if l > reset then
      reset = l
    end
  end
end
local keylife = reset
reset = 0
for _, g in ipairs(limits) do
  local l = life(g.tat, g.rem, now)
  if l > reset then
    reset = l
  end
end
if wrote then
  expire_in(key, keylife)
elseif #flat > 0 and redis.call('PTTL', key) == -1 then
  expire_in(key, keylife) -- repair a key found without TTL
end
return {allowed, remaining, retry, reset, limiting}