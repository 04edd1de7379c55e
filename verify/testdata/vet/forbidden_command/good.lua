-- Deletes a client's keys.
--
-- @script forget
-- @key state   the client's state
-- @arg client string   the client
-- @return deleted int

local n = 0
if ARGV[1] ~= '' then
  n = redis.call('EXISTS', KEYS[1])
end
return {n + redis.call('DEL', KEYS[1])}
