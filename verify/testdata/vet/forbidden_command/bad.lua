-- Deletes a client's keys.
--
-- @script forget
-- @key state   the client's state
-- @arg client string   the client
-- @return deleted int

local n = 0
for _, k in ipairs(redis.call('KEYS', 'state:' .. ARGV[1] .. ':*')) do
  n = n + redis.call('DEL', k)
end
return {n + redis.call('DEL', KEYS[1])}
