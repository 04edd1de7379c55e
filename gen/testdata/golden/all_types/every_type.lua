-- Every annotation type as an argument, an optional argument and a reply
-- element, with two keys.
--
-- @script every_type
-- @key source       the hash to read
-- @key dest_set
-- @arg count int        how many items
-- @arg ratio float      a fraction in [0, 1]
-- @arg label string     any bytes
-- @arg enabled bool     sent as 1 or 0
-- @arg now int?         client clock in µs; Redis TIME when unset
-- @arg scale float?
-- @arg tag string?      "" when unset
-- @arg strict bool?
-- @return total int     sum of the counters
-- @return mean float    sent back as a string
-- @return name string
-- @return ok bool
local count = tonumber(ARGV[1])
local ratio = tonumber(ARGV[2])
local now = tonumber(ARGV[5])
if now == nil then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
redis.call('SADD', KEYS[2], ARGV[3])
return {count, tostring(ratio), ARGV[3] .. ARGV[7], ARGV[4] == '1'}
