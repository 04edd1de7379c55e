-- SlidingWindowMulti checks several sliding-window-counter limits on one
-- identity (say 10 per second AND 1000 per hour) and charges all of them or
-- none: a request is allowed iff every limit admits it, and only then is
-- cost counted in every limit. Each limit behaves exactly as the
-- sliding_window script with the same limit and period.
--
-- remaining is the smallest remaining over the limits; retry_after is 0
-- when allowed, -1 when cost exceeds some limit, else the largest
-- retry_after over the limits (the first moment all of them admit: each
-- estimate only falls while nothing is charged); reset_after is the largest
-- reset_after; limiting is the 1-based position in limits of the limit that
-- decided: the first with the largest retry_after when denied (the first
-- too small when -1), the first with the smallest remaining when allowed. A
-- denied request and a cost of 0 change nothing. Times are in µs.
--
-- @script sliding_window_multi
-- @key state          hash: one field "limit:period" per limit, holding "w:c:p" as in sliding_window
-- @arg limits string  comma-separated limit:period pairs, e.g. "10:1000000,1000:3600000000"; at most 16, no repeats
-- @arg cost int       units this request takes from every limit, >= 0 (0 only reports)
-- @arg now int?       client clock in µs since the Unix epoch; Redis TIME when unset
-- @return allowed bool
-- @return remaining int     largest cost admitted right after this decision
-- @return retry_after int   µs until the same cost is admitted; 0 if allowed, -1 if it never fits
-- @return reset_after int   µs until every limit's counts have left their windows
-- @return limiting int      1-based position in limits of the limit that decided

-- State: fields are named by the normalized limit, so reordering the limits
-- keeps their state, and a changed limit starts afresh. When the script
-- writes, it also deletes fields of limits no longer given whose counts have
-- left their windows; memory is one field per limit in use. TTL: until the
-- last count of any field has left its window, rounded up to whole ms.

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

-- parse_limits returns the limits as a list of {limit, period, field}, or nil
-- and a message.
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
    local a, b = string.match(item, '^(%d+):(%d+)$')
    if not a or #a > 16 or #b > 16 then
      return nil, 'limit ' .. fmt(n) .. ': want limit:period as decimal integers, got "' .. string.sub(item, 1, 40) .. '"'
    end
    local l, p = tonumber(a), tonumber(b)
    if l < 1 or l > MAX or p < 1 or p > MAX_PERIOD or l * p > MAX then
      return nil, 'limit ' .. fmt(n) .. ': want limit >= 1, 1 <= period <= ' .. fmt(MAX_PERIOD) .. ' and limit*period <= ' .. fmt(MAX) .. ', got "' .. item .. '"'
    end
    local field = fmt(l) .. ':' .. fmt(p)
    if seen[field] then
      return nil, 'limit ' .. fmt(n) .. ': ' .. field .. ' repeats limit ' .. fmt(seen[field])
    end
    seen[field] = n
    out[n] = {limit = l, period = p, field = field}
  end
  return out, nil
end

-- load reads a field value "w:c:p" for a window of length period at now;
-- it returns the current window, the time the decision is made at (later
-- than now only when the state is ahead of the caller's clock), and the
-- current and previous counts.
local function load(v, period, now)
  local win = divmod(now, period)
  local at, cur, prev = now, 0, 0
  local a, b, c = string.match(v or '', '^(%d+):(%d+):(%d+)$')
  if a then
    local sw, sc, sp = tonumber(a), tonumber(b), tonumber(c)
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
  return win, at, cur, prev
end

-- reset_of is the time from now until both counts have left the window.
local function reset_of(period, win, at, cur, prev, now)
  local e = at - win * period
  if cur > 0 then
    return 2 * period - e + at - now
  elseif prev > 0 then
    return period - e + at - now
  end
  return 0
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

-- Evaluate every limit as sliding_window does.
local allowed, retry, limiting = 1, 0, 0
for i, s in ipairs(limits) do
  local period = s.period
  s.win, s.at, s.cur, s.prev = load(fields[s.field], period, now)
  local e = s.at - s.win * period
  if cost > s.limit then
    if retry ~= -1 then
      retry, limiting = -1, i
    end
    allowed = 0
  elseif s.prev * (period - e) + (s.cur + cost) * period > s.limit * period then
    allowed = 0
    local free = (s.limit - s.cur - cost) * period
    local w
    if s.prev > 0 and free >= s.prev then
      w = period - e - divmod(free, s.prev)
    else
      local e2 = 0
      if s.cur > 0 then
        e2 = period - divmod((s.limit - cost) * period, s.cur)
        if e2 < 0 then
          e2 = 0
        end
      end
      if e2 < period then
        w = period - e + e2
      else
        w = 2 * period - e
      end
    end
    w = w + s.at - now
    if retry ~= -1 and w > retry then
      retry, limiting = w, i
    end
  end
end

local wrote = false
if allowed == 1 and cost > 0 then
  local args = {}
  local current = {}
  for _, s in ipairs(limits) do
    s.cur = s.cur + cost
    local v = fmt(s.win) .. ':' .. fmt(s.cur) .. ':' .. fmt(s.prev)
    args[#args + 1] = s.field
    args[#args + 1] = v
    current[s.field] = v
  end
  redis.call('HSET', key, unpack(args))
  -- Forget limits no longer given once their counts have left their windows.
  for f, v in pairs(fields) do
    if not current[f] then
      local p = tonumber(string.match(f, '^%d+:(%d+)$') or '')
      local gone = true
      if p and p >= 1 and p <= MAX_PERIOD then
        local win, at, cur, prev = load(v, p, now)
        gone = reset_of(p, win, at, cur, prev, now) <= 0
      end
      if gone then
        redis.call('HDEL', key, f)
        fields[f] = nil
      end
    end
  end
  for f, v in pairs(current) do
    fields[f] = v
  end
  wrote = true
end

local remaining, reset = -1, 0
for i, s in ipairs(limits) do
  local period = s.period
  local e = s.at - s.win * period
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
  local l = reset_of(period, s.win, s.at, s.cur, s.prev, now)
  if l > reset then
    reset = l
  end
end
-- The key lives as long as its longest-lived field.
local keylife = 0
for f, v in pairs(fields) do
  local p = tonumber(string.match(f, '^%d+:(%d+)$') or '')
  if p and p >= 1 and p <= MAX_PERIOD then
    local win, at, cur, prev = load(v, p, now)
    local l = reset_of(p, win, at, cur, prev, now)
    if l > keylife then
      keylife = l
    end
  end
end
if wrote then
  expire_in(key, keylife)
elseif #flat > 0 and redis.call('PTTL', key) == -1 then
  expire_in(key, keylife) -- repair a key found without TTL
end
return {allowed, remaining, retry, reset, limiting}