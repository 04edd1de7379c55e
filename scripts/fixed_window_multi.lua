-- FixedWindowMulti checks several fixed-window limits on one identity (say
-- 10 per second AND 1000 per hour) and charges all of them or none: a
-- request is allowed iff every limit admits it, and only then is cost
-- counted in every limit. Each limit has its own key holding exactly the
-- state the fixed_window script keeps, so a limit checked alone
-- (fixed_window) or with others (fixed_window_multi, in any order) spends
-- one quota; on its key, each limit decides exactly as fixed_window with
-- the same limit and period.
--
-- remaining is the smallest remaining over the limits; retry_after is 0
-- when allowed, -1 when cost exceeds some limit, else the largest
-- retry_after over the limits (the first moment all of them admit: while
-- nothing is charged, counts only end); reset_after is the largest
-- reset_after; limiting is the 1-based position of the limit (its key) that
-- decided: the first with the largest retry_after when denied (the first
-- too small when -1), the first with the smallest remaining when allowed. A
-- denied request and a cost of 0 change nothing. Times are in µs.
--
-- The keys need not share a hash slot: Redis refuses keys of different
-- slots in one script only in cluster mode. On a standalone Redis the
-- caller may pass keys of any slots (the limits of several identities, say)
-- and the call is as atomic as any other; on a cluster it keeps the keys of
-- a call in one slot. Which keys to send is the caller's choice.
--
-- @script fixed_window_multi
-- @key states...      one string "t:n:p" per limit, as the fixed_window script keeps it; 1 to 16 keys
-- @arg cost int       units this request takes from every limit, >= 0 (0 only reports)
-- @arg now int?       client clock in µs since the Unix epoch; Redis TIME when unset
-- @arg each bool?     also reply every limit's own remaining, retry_after and reset_after (per_limit)
-- @arg limits int...  limit and period (µs) of each key's limit, in the order of the keys: 2 numbers per key, bounds as in fixed_window
-- @return allowed bool
-- @return remaining int     largest cost admitted right after this decision
-- @return retry_after int   µs until the same cost is admitted; 0 if allowed, -1 if it never fits
-- @return reset_after int   µs until every limit's count is gone
-- @return limiting int      1-based position of the limit (its key) that decided
-- @return per_limit int...  with each: remaining, retry_after and reset_after of every limit, in the order of the keys

-- State: each key as in fixed_window, "t:n:p": the time of the last
-- admission, the cost admitted in the window holding it, and the window
-- length it was counted under, which a changed period reads as
-- fixed_window does ("w:n" of earlier versions reads as counted under the
-- caller's period). Each key gets its own TTL, until the end of its own
-- window, rounded up to whole ms and at least 2 ms, written with its value
-- by SET ... PX whenever the request is admitted. Memory: one string of at
-- most 50 bytes per limit and identity.

-- Cost per decision: one MGET of all keys, then a SET ... PX per key when
-- the request is counted, else a PTTL per key that exists (TIME first when
-- now is unset).

-- Repair: as in fixed_window, a key found without TTL (PTTL -1) gets it
-- back on any call; that is the only write a denied request or a cost of 0
-- can make.

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
    return redis.error_reply('ERR sluice: fixed_window_multi: ' .. msg)
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
if #ARGV ~= 3 + 2 * n then
  local h = lib()
  local keys = 'keys'
  if n == 1 then
    keys = 'key'
  end
  return h.bad('want cost, now, each and 2 numbers (limit, period) per key: ' .. h.fmt(3 + 2 * n) .. ' arguments for ' .. h.fmt(n) .. ' ' .. keys .. ', got ' .. h.fmt(#ARGV))
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
-- accepts the same values and names the first bad one.
local cost, now, each = tonumber(argv[1]), tonumber(argv[2]), argv[3]
local ok = find(table.concat(argv), '^%d+$') and cost and cost <= MAX and (now and now <= MAX or argv[2] == '')
  and (each == '' or each == '0' or each == '1')
local lim, per = {}, {}
for i = 1, n do
  if not ok then
    break
  end
  local limit, period = tonumber(argv[2 * i + 2]), tonumber(argv[2 * i + 3])
  ok = limit and period and limit >= 1 and limit <= MAX and period >= 1 and period <= MAX_PERIOD
  lim[i], per[i] = limit, period
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
    local at = 3 + 2 * (i - 1)
    local name = 'limit ' .. h.fmt(i) .. ': '
    local limit, period
    limit, err = h.int_arg(at + 1, name .. 'limit', 1, MAX)
    if err then return h.bad(err) end
    period, err = h.int_arg(at + 2, name .. 'period', 1, MAX_PERIOD)
    if err then return h.bad(err) end
    lim[i], per[i] = limit, period
  end
end
each = each == '1'
if not now then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end

-- Evaluate every limit as fixed_window does on its key; one MGET reads them
-- all (a key of another type reads as missing, as in fixed_window).
local vals = redis.call('MGET', unpack(keys))
local ats, useds, wins, ends = {}, {}, {}, {}
local waits = each and {} -- with each: every limit's own wait (0 when it admits)
local allowed, retry, limiting = 1, 0, 0
for i = 1, n do
  local limit, period = lim[i], per[i]
  local win = floor(now / period)
  local wend = (win + 1) * period -- when the count ends
  local used, at = 0, now
  local v = vals[i]
  if v then
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
      -- The count is in the window holding t: under another period, as in
      -- fixed_window, the new window holding t, and only until its own
      -- window would have ended.
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
  ats[i], useds[i], wins[i], ends[i] = at, used, win, wend - now
  if cost > limit then
    if retry ~= -1 then
      retry, limiting = -1, i
    end
    allowed = 0
    if each then
      waits[i] = -1
    end
  elseif cost > 0 and used + cost > limit then
    -- Denied until the count ends.
    allowed = 0
    local w = wend - now
    if each then
      waits[i] = w
    end
    if retry ~= -1 and w > retry then
      retry, limiting = w, i
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
  local limit, period, used = lim[i], per[i], useds[i]
  local life = ends[i] -- until the count ends
  if wrote then
    used = used + cost
    life = (wins[i] + 1) * period - now -- written under this period
  elseif used == 0 then
    life = 0
  end
  local r = limit - used
  if r < 0 then
    r = 0
  end
  if remaining == -1 or r < remaining then
    remaining = r
    if allowed == 1 then
      limiting = i
    end
  end
  if life > reset then
    reset = life
  end
  if each then
    reply[3 * i + 3], reply[3 * i + 4], reply[3 * i + 5] = r, waits[i] or 0, life
  end
  if wrote then
    -- The TTL goes with the value: until the window ends, in whole ms, at
    -- least 2 ms.
    local ms = floor((life + 999) / 1000)
    if ms < 2 then
      ms = 2
    end
    redis.call('SET', keys[i], format('%d:%d:%d', ats[i], used, period), 'PX', format('%d', ms))
  elseif vals[i] and redis.call('PTTL', keys[i]) == -1 then
    lib().expire_in(keys[i], life) -- repair a key found without TTL
  end
end
if each then
  reply[1], reply[2], reply[3], reply[4], reply[5] = allowed, remaining, retry, reset, limiting
  return reply
end
return {allowed, remaining, retry, reset, limiting}