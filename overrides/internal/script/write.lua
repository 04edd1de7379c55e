-- Write sets or removes one identity's override under a policy in one
-- atomic step: it sweeps the entries whose Until has passed, checks the
-- bound on the policy's count, writes, sets a new version and gives both
-- keys the expiry of the latest Until (none while an entry never expires),
-- so that an abandoned policy disappears. An identity of "" only sweeps.
--
-- Each value starts with its Until, in µs since the Unix epoch (0: never),
-- and a space. The version, SEQ:SECONDS.MICROS (a counter and the Redis
-- TIME of the write), is what readers cache and compare with the version
-- of the copy they hold; a policy that expired and was written again never
-- repeats one.
--
-- @script write
-- @key overrides        the policy's hash: identity -> value
-- @key version          the policy's version, in the hash's slot
-- @arg identity string  the identity whose override is written; "" sweeps only
-- @arg value string     the encoded override; "" removes the identity's
-- @arg now int          µs since the Unix epoch: entries whose Until is at or before now are swept
-- @arg max int          the most identities the hash may hold
-- @return status int    1 written or removed, 0 nothing to remove, -1 the hash is full
-- @return count int     identities in the hash afterwards
-- @return expire_at int the keys' expiry in ms since the Unix epoch; 0 none; -1 they are gone
-- @return previous string the identity's value before the write, "" when it had none (or it had expired)

-- Cost: one HGETALL and a command per entry swept; a write holds Redis for
-- a time linear in the size of the hash (MaxPerPolicy bounds it).

-- An override that never expires keeps both keys with no TTL, on purpose.
-- vet:ignore-file no-ttl

local key, vkey = KEYS[1], KEYS[2]
local id, value = ARGV[1], ARGV[2]
local now, max = tonumber(ARGV[3]), tonumber(ARGV[4])

-- until_of is the Until of an encoded value, nil when it is malformed.
local function until_of(v)
  return tonumber(string.match(v, '^(%d+) ') or '')
end

local all = redis.call('HGETALL', key)
local n, latest, forever, changed = 0, 0, false, false
local previous = ''
for i = 1, #all, 2 do
  local f, v = all[i], all[i + 1]
  local u = until_of(v)
  if u ~= nil and u > 0 and u <= now then
    redis.call('HDEL', key, f)
    changed = true
  elseif f == id then
    previous = v
  else
    n = n + 1
    -- A value this version cannot read is kept, and kept alive.
    if u == nil or u == 0 then
      forever = true
    elseif u > latest then
      latest = u
    end
  end
end

local status = 1
if id == '' then
  status = 0
elseif value ~= '' then
  if previous == '' and n >= max then
    status = -1
  else
    redis.call('HSET', key, id, value)
    n, changed = n + 1, true
    local u = until_of(value)
    if u == 0 then
      forever = true
    elseif u > latest then
      latest = u
    end
  end
elseif previous ~= '' then
  redis.call('HDEL', key, id)
  changed = true
else
  status = 0
end

if n == 0 then
  redis.call('DEL', key, vkey)
  return {status, 0, -1, previous}
end
if changed or redis.call('EXISTS', vkey) == 0 then
  local old = redis.call('GET', vkey) or ''
  local seq = tonumber(string.match(old, '^(%d+):') or '0')
  local t = redis.call('TIME')
  redis.call('SET', vkey, string.format('%d', seq + 1) .. ':' .. t[1] .. '.' .. t[2])
end
local at = 0
if not forever then
  at = math.ceil(latest / 1000)
end
for _, k in ipairs({key, vkey}) do
  local cur = redis.call('PEXPIRETIME', k)
  if forever and cur ~= -1 then
    redis.call('PERSIST', k)
  elseif not forever and cur ~= at then
    redis.call('PEXPIREAT', k, string.format('%d', at))
  end
end
return {status, n, at, previous}