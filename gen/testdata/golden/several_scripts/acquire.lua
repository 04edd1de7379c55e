-- Acquire takes a slot.
-- @script acquire
-- @key slots
-- @arg id string
-- @arg max int
-- @return ok bool
if redis.call('SCARD', KEYS[1]) >= tonumber(ARGV[2]) then
  return {false}
end
redis.call('SADD', KEYS[1], ARGV[1])
return {true}
