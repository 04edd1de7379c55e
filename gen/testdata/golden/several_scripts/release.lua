-- Release gives a slot back.
-- @script release
-- @key slots
-- @arg id string
-- @return removed bool
return {redis.call('SREM', KEYS[1], ARGV[1])}
