-- Write sets or removes one identity's override in a policy's hash in one
-- atomic step: it sweeps the entries whose Until has passed, checks the
-- bound on the hash's size, writes, bumps the hash's version and gives the
-- hash the expiry of its latest Until (none while an entry never expires),
-- so that an abandoned hash disappears. An identity of "" only sweeps.
--
-- Each value starts with its Until, in µs since the Unix epoch (0: never),
-- and a space. The field "" holds the hash's version, SEQ:SECONDS.MICROS
-- (a counter and the Redis TIME of the write): readers compare it with the
-- version of the copy they hold, and a hash that expired and was written
-- again never repeats a version.
--
-- @script write
-- @key overrides        the policy's hash: identity -> value, "" -> version
-- @arg identity string  the identity whose override is written; "" sweeps only
-- @arg value string     the encoded override; "" removes the identity's
-- @arg now int          µs since the Unix epoch: entries whose Until is at or before now are swept
-- @arg max int          the most identities the hash may hold
-- @return status int    1 written or removed, 0 nothing to remove, -1 the hash is full
-- @return count int     identities in the hash afterwards
-- @return expire_at int the hash's expiry in ms since the Unix epoch; 0 none; -1 the hash is gone
-- @return previous string the identity's value before the write, "" when it had none (or it had expired)

-- Cost: one HGETALL and a command per entry swept; a write holds Redis for
-- a time linear in the size of the hash (MaxPerPolicy bounds it).

-- An override that never expires keeps the hash with no TTL, on purpose.
-- vet:ignore-file no-ttl

local key = KEYS[1]
local id, value = ARGV[1], ARGV[2]
local now, max = tonumber(ARGV[3]), tonumber(ARGV[4])

-- until_of is the Until of an encoded value, nil when it is malformed.
local function until_of(v)
  return tonumber(string.match(v, '^(%d+) ') or '')
end

local all = redis.call('HGETALL', key)
local n, latest, forever, changed = 0, 0, false, false
local version, previous = '', ''
for i = 1, #all, 2 do
  local f, v = all[i], all[i + 1]
  if f == '' then
    version = v
  else
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
  redis.call('DEL', key)
  return {status, 0, -1, previous}
end
if changed then
  local seq = tonumber(string.match(version, '^(%d+):') or '0')
  local t = redis.call('TIME')
  redis.call('HSET', key, '', string.format('%d', seq + 1) .. ':' .. t[1] .. '.' .. t[2])
end
local at = 0
if not forever then
  at = math.ceil(latest / 1000)
end
local cur = redis.call('PEXPIRETIME', key)
if forever and cur ~= -1 then
  redis.call('PERSIST', key)
elseif not forever and cur ~= at then
  redis.call('PEXPIREAT', key, string.format('%d', at))
end
return {status, n, at, previous}