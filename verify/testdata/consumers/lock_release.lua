-- LockRelease releases the lock when owner still holds it under the
-- fencing token it was given; a lock that expired or passed to someone
-- else is left alone.
--
-- @script lock_release
-- @key lock           hash written by lock_acquire
-- @arg owner string   who releases
-- @arg token int      the fencing token lock_acquire gave owner
-- @return released bool
local owner, token = ARGV[1], ARGV[2]
local holder = redis.call('HMGET', KEYS[1], 'owner', 'token')
if holder[1] == owner and holder[2] == token then
  redis.call('DEL', KEYS[1])
  return {true}
end
return {false}
