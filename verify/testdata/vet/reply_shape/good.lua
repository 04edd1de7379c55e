-- Counts a hit.
--
-- @script hit
-- @key counter   the count
-- @return count int
-- @return limited bool
-- @return key string

local n = redis.call('INCR', KEYS[1])
redis.call('PEXPIRE', KEYS[1], 1000)
if n > 100 then
  return {n, 1, KEYS[1]}
end
return {n, 0, KEYS[1]}
