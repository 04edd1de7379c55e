-- LockAcquire takes the lock for owner for ttl_ms milliseconds, or extends
-- it when owner holds it already, and returns a fencing token: a number
-- that grows with every new holder, so that the storage the lock protects
-- can refuse a write carrying an older token (from an owner that paused
-- until its lock expired).
--
-- @script lock_acquire
-- @key lock           hash: the owner and token of the current holder
-- @key fence          counter of holders; it never expires
-- @arg owner string   who asks: unique per process and attempt
-- @arg ttl_ms int     how long the lock lasts unless extended, >= 1
-- @return acquired bool
-- @return token int   the holder's fencing token (the caller's when acquired)
-- @return ttl_ms int  ms until the lock expires
local owner, ttl = ARGV[1], tonumber(ARGV[2])
if owner == '' or not ttl or ttl < 1 or ttl ~= math.floor(ttl) then
  return redis.error_reply('ERR lock_acquire: want an owner and ttl_ms >= 1')
end
local holder = redis.call('HMGET', KEYS[1], 'owner', 'token')
if holder[1] and holder[1] ~= owner then
  return {false, tonumber(holder[2]), redis.call('PTTL', KEYS[1])}
end
local token = tonumber(holder[2])
if not holder[1] then
  -- vet:ignore no-ttl the fence outlives every lock: with a TTL, tokens could repeat
  token = redis.call('INCR', KEYS[2])
  redis.call('HSET', KEYS[1], 'owner', owner, 'token', token)
end
redis.call('PEXPIRE', KEYS[1], ttl)
return {true, token, ttl}
