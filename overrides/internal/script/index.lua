-- Index adds a policy to the set of policies that hold overrides (what
-- Store.List reads for every policy) and keeps the set's expiry at the
-- latest of its policies' hashes (none while one of them never expires).
-- A policy whose hash has gone stays listed until the set expires; readers
-- skip it.
--
-- @script index
-- @key index            the set of policy names
-- @arg policy string    the policy written
-- @arg expire_at int    its hash's expiry in ms since the Unix epoch; 0 none
-- @return count int     policies in the set

-- A policy whose override never expires keeps the set with no TTL, on purpose.
-- vet:ignore-file no-ttl

local key, policy, at = KEYS[1], ARGV[1], tonumber(ARGV[2])
local cur = redis.call('PEXPIRETIME', key) -- -2: no key, -1: no expiry
redis.call('SADD', key, policy)
if at == 0 then
  if cur ~= -1 then
    redis.call('PERSIST', key)
  end
elseif cur == -2 or (cur >= 0 and at > cur) then
  redis.call('PEXPIREAT', key, ARGV[2])
end
return {redis.call('SCARD', key)}