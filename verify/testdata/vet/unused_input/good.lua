-- Takes a token.
--
-- @script take
-- @key bucket    the tokens
-- @key audit     an audit log
-- @arg cost int  tokens to take
-- @return left int

local left = redis.call('DECRBY', KEYS[1], ARGV[1])
redis.call('PEXPIRE', KEYS[1], 1000)
redis.call('RPUSH', KEYS[2], ARGV[1])
redis.call('PEXPIRE', KEYS[2], 1000)
return {left}
