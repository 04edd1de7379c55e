-- Takes tokens.
--
-- @script take
-- @key bucket    the tokens
-- @arg cost int  tokens to take
-- @return left int

local left = redis.call('DECRBY', KEYS[1], ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2] or 1000)
return {left}
