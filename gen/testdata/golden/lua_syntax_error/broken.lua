-- @script broken
-- @key k
-- @return n int
local n = redis.call('GET', KEYS[1]
return {n}
