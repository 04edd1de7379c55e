-- FixedWindow admits at most limit units per window of window µs, windows
-- aligned to the Unix epoch. A denied request changes nothing.
--
-- @script fixed_window
-- @key state          hash {w = window start in µs, n = units admitted in it}
-- @arg limit int      units per window, >= 1
-- @arg window int     window length in µs, >= 1
-- @arg cost int       units this request takes, >= 0
-- @arg now int?       client clock in µs; Redis TIME when unset
-- @return allowed bool
-- @return remaining int     units still admitted in this window
-- @return retry_after int   µs until the same cost is admitted; 0 if allowed, -1 if never
-- @return reset_after int   µs until the window ends

local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
if not limit or not window or not cost or limit < 1 or window < 1 or cost < 0 then
  return redis.error_reply('ERR fixed_window: limit and window must be >= 1, cost >= 0')
end
local now = tonumber(ARGV[4])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local key = KEYS[1]
local start = now - now % window
local reset_after = start + window - now
local state = redis.call('HMGET', key, 'w', 'n')
local used = 0
if tonumber(state[1]) == start then
  used = tonumber(state[2]) or 0
end

if used + cost > limit then
  local retry = reset_after
  if cost > limit then
    retry = -1
  end
  return {0, limit - used, retry, reset_after}
end
if cost > 0 then
  used = used + cost
  redis.call('HSET', key, 'w', start, 'n', used)
  redis.call('PEXPIRE', key, math.ceil(reset_after / 1000))
end
return {1, limit - used, 0, reset_after / 1000}
