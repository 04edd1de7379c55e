-- Moves a token from one bucket to another.
--
-- @script move
-- @key from   source list
-- @key to     destination list
-- @return moved string

local v = redis.call('LMOVE', KEYS[1], KEYS[2], 'LEFT', 'RIGHT')
redis.call('PEXPIRE', KEYS[2], 1000)
return {v}
