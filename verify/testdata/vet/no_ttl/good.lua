-- Remembers when a client was last seen.
--
-- @script seen
-- @key last   hash of the last visit
-- @arg now int   µs
-- @return visits int

local n = redis.call('HINCRBY', KEYS[1], 'visits', 1)
redis.call('HSET', KEYS[1], 'at', ARGV[1])
redis.call('PEXPIRE', KEYS[1], 86400000)
return {n}
