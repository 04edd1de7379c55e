-- Peeks at a counter.
--
-- @script peek
-- @readonly
-- @key counter   the count
-- @return count int

local n = tonumber(redis.call('GET', KEYS[1]) or '0')
if n == 0 then
  redis.call('SET', KEYS[1], '0', 'PX', 1000)
end
return {n}
