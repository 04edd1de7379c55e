-- FixedWindow checks and charges a fixed-window limit: at most limit units of
-- cost are admitted in every epoch-aligned window [k*period, (k+1)*period).
-- A request is allowed iff count + cost <= limit, where count is the cost
-- already admitted in the current window.
--
-- remaining is the largest cost admitted right after this decision;
-- retry_after is 0 when allowed, -1 when cost > limit, else the time until
-- the next window; reset_after is the time until the window's count is
-- gone. A denied request, a cost of 0 and a peek change nothing. Times are in µs.
--
-- When the limit changes, the count carries over and is held against the
-- new limit. When the period changes, the count stands at the time of the
-- last admission: it counts while the new window holding now holds that
-- time, and at most until its own window would have ended; the next
-- admission writes it, with its cost, into the new window holding now
-- (docs/algorithms.md, "When a limit changes").
--
-- @script fixed_window
-- @key state          string "t:n:p": the cost n admitted in the window of length p µs holding t, the time of the last admission
-- @arg limit int      units admitted per window, >= 1
-- @arg period int     window length in µs, >= 1
-- @arg cost int       units this request takes, >= 0 (0 only reports)
-- @arg now int?       client clock in µs since the Unix epoch; Redis TIME when unset
-- @arg peek bool?     decide as for cost and reply as if charged, but write nothing (Limiter.Peek)
-- @return allowed bool
-- @return remaining int     largest cost admitted right after this decision
-- @return retry_after int   µs until the same cost is admitted; 0 if allowed, -1 if it never fits
-- @return reset_after int   µs until the window's count is gone

-- State: the time of the last admission and the window length are stored
-- next to the count, so a key that outlives its window (or a client clock
-- that disagrees with the server's, or a changed period) never carries a
-- count into the wrong window. A window ahead of the caller's clock
-- (another client's clock runs ahead) is kept: the request is counted in
-- that later window, which never admits more than limit per window. TTL:
-- the time until the end of the window, rounded up to whole ms and at least
-- 2 ms, written with the value by SET ... PX; a count is never read past
-- the end of the window it was written in. Memory: one string of at most
-- 50 bytes per identity (about 29 for a window of a minute).

-- Cost per decision: GET, then SET ... PX when a request is counted, else
-- PTTL when the key exists (TIME first when now is unset); the arguments
-- are checked at once in the usual case.

-- Repair: a key can lose its TTL only by a command from outside (PERSIST,
-- a SET without PX); one found without TTL (PTTL -1) gets it back on any
-- call but a peek, and that is the only write a denied request or a cost
-- of 0 can make. An admission writes the TTL with the value anyway.

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
    return redis.error_reply('ERR sluice: fixed_window: ' .. msg)
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

-- Arguments: the usual ARGV (all five present, each empty or decimal
-- digits, every number in range) passes one check; anything else goes
-- through int_arg, which accepts the same values and names the first bad
-- one.
local limit, period, cost, now, peek
if #ARGV == 5 and find(table.concat(ARGV), '^%d+$') then
  limit, period, cost, now, peek = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
end
if not (limit and period and cost and limit >= 1 and limit <= MAX and period >= 1 and period <= MAX_PERIOD
    and cost <= MAX and (now and now <= MAX or ARGV[4] == '') and (peek == '' or peek == '0' or peek == '1')) then
  local h = lib()
  local err
  limit, err = h.int_arg(1, 'limit', 1, MAX)
  if err then return h.bad(err) end
  period, err = h.int_arg(2, 'period', 1, MAX_PERIOD)
  if err then return h.bad(err) end
  cost, err = h.int_arg(3, 'cost', 0, MAX)
  if err then return h.bad(err) end
  now, err = h.int_arg(4, 'now', 0, MAX, true)
  if err then return h.bad(err) end
  peek = ARGV[5]
  if peek ~= nil and peek ~= '' and peek ~= '0' and peek ~= '1' then
    return h.bad('peek must be 1, 0 or empty, got "' .. string.sub(peek, 1, 24) .. '"')
  end
end
peek = peek == '1'
if not now then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end

-- State: "t:n:p": the cost n admitted in the window of length p holding
-- t, where t is the time of the last admission (or the start of the window
-- it was counted in, when that was ahead of the caller's clock) and p the
-- window length it was counted under. A missing key reads as no count; so
-- does a value of another form or a key of another type (such as the hash
-- earlier versions kept), which the next admission replaces. "w:n", which
-- earlier versions wrote (the window index w), reads as counted under the
-- caller's period.
local key = KEYS[1]
local v = redis.pcall('GET', key)
local found = type(v) == 'string'
local win = floor(now / period)
local wend = (win + 1) * period -- when the count ends
local used, at = 0, now
if found then
  local st, sn, sp = string.match(v, '^(%d+):(%d+):(%d+)$')
  st, sn, sp = tonumber(st), tonumber(sn), tonumber(sp)
  if not st then
    st, sn = string.match(v, '^(%d+):(%d+)$')
    st, sn, sp = tonumber(st), tonumber(sn), period
    if st then
      st = st * period
    end
  end
  if st and sn and st <= 2 * MAX and sn <= MAX and sp >= 1 and sp <= MAX_PERIOD then
    -- The count is in the window holding t: under another period, the new
    -- window holding t, and only until its own window would have ended.
    local sw = floor(st / period)
    if sw >= win then
      local send = (sw + 1) * period
      if sp ~= period then
        local own = (floor(st / sp) + 1) * sp
        if own < send then
          send = own
        end
      end
      if now < send then
        used, at, win, wend = sn, st, sw, send
        if at < now then
          at = now
        end
      end
    end
  end
end
wend = wend - now -- µs until the count ends

local allowed, retry = 0, 0
if cost > limit then
  retry = -1
elseif used + cost <= limit or cost == 0 then
  allowed = 1
  if cost > 0 then
    used = used + cost
    wend = (win + 1) * period - now -- written under this period
  end
else
  retry = wend
end

local remaining = limit - used
if remaining < 0 then
  remaining = 0
end
local reset = 0
if used > 0 then
  reset = wend
end
if allowed == 1 and cost > 0 and not peek then
  -- The TTL goes with the value: until the window ends, in whole ms, at
  -- least 2 ms.
  local ms = floor((wend + 999) / 1000)
  if ms < 2 then
    ms = 2
  end
  redis.call('SET', key, format('%d:%d:%d', at, used, period), 'PX', format('%d', ms))
elseif found and not peek and redis.call('PTTL', key) == -1 then
  lib().expire_in(key, reset) -- repair a key found without TTL
end
return {allowed, remaining, retry, reset}