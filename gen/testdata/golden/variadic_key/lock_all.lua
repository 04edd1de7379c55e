-- LockAll takes a lock on every resource in KEYS, or on none of them.
--
-- @script lock_all
-- @key resources...   one lock key per resource, all in one hash slot
-- @arg owner string   stored in every lock
-- @arg ttl_ms int     lifetime of the locks in ms
-- @return taken int   how many locks were taken: 0 or #KEYS
for i = 1, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 1 then
    return {0}
  end
end
for i = 1, #KEYS do
  redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[2])
end
return {#KEYS}
