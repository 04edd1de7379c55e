-- Counts a hit.
--
-- @script hit
-- @key counter   the count
-- @return count int

local n = redis.call('INCR', KEYS[1])
redis.call('PEXPIRE', KEYS[1], 1000)
return {n}
