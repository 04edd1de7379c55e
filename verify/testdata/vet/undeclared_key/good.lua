-- Counts a hit and a global total.
--
-- @script hits
-- @key counter   hits of one client
-- @key total     hits of every client
-- @key report    the report
-- @return hits int
-- @return total int

local hits = redis.call('INCR', KEYS[1])
redis.call('PEXPIRE', KEYS[1], 60000)
local total = redis.call('INCR', KEYS[2])
redis.call('PEXPIRE', KEYS[2], 60000)
local report = KEYS[3]
redis.call('SET', report, hits, 'PX', 60000)
return {hits, total}
