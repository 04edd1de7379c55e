-- Counts a hit and a global total.
--
-- @script hits
-- @key counter   hits of one client
-- @arg name string   report name
-- @return hits int
-- @return total int

local hits = redis.call('INCR', KEYS[1])
redis.call('PEXPIRE', KEYS[1], 60000)
local total = redis.call('INCR', 'hits:total')
redis.call('PEXPIRE', 'hits:total', 60000)
local report = 'report:' .. ARGV[1]
redis.call('SET', report, hits, 'PX', 60000)
return {hits, total}
