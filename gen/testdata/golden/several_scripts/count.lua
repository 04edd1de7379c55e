-- @script count
-- @readonly
-- @key slots
-- @return n int
return {redis.call('SCARD', KEYS[1])}
