-- Weighted charges cost against a counter once per weight given.
--
-- @script weighted
-- @key counter
-- @arg cost int          units per weight
-- @arg now int?          client clock in µs; Redis TIME when unset
-- @arg weights int...    one or more weights
-- @return total int      the counter after the charge
local cost = tonumber(ARGV[1])
local total = 0
for i = 3, #ARGV do
  total = redis.call('INCRBY', KEYS[1], cost * tonumber(ARGV[i]))
end
redis.call('PEXPIRE', KEYS[1], 60000)
return {total}
