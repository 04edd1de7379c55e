-- Checks a limit.
--
-- @script check
-- @key counter   the count
-- @arg limit int   most hits
-- @return allowed bool

local limit = tonumber(ARGV[1])
local n = tonumber(redis.call('GET', KEYS[1]) or '0')
if n < limit then
  return {1}
end
return {0}
