-- Counts a hit.
--
-- @script count
-- @key counter   the count
-- @return count int

local function bump(key)
  return redis.call('INCR', key)
end
local count = bump(KEYS[1])
redis.call('PEXPIRE', KEYS[1], 1000)
return {count}
