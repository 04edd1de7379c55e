-- Peek reads a counter without changing it.
--
-- @script peek
-- @readonly
-- @key counter   the counter to read
-- @return value int   0 when the key is missing
return {tonumber(redis.call('GET', KEYS[1]) or '0')}
