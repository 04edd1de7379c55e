-- Incr adds one to a counter.
--
-- @script incr
-- @key counter
-- @return value int
local v = redis.call('INCR', KEYS[1])
return {v}
