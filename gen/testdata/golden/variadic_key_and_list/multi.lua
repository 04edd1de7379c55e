-- Multi checks several fixed-window limits on one identity, one key and
-- two numbers (limit, period) per limit, and charges all of them or none.
--
-- @script multi
-- @key windows...     one counter per limit, all in one hash slot
-- @arg cost int       units this request takes from every limit
-- @arg now int?       client clock in µs; Redis TIME when unset
-- @arg limits int...  limit and period in µs of each limit, in the order of windows
-- @return allowed bool
if #ARGV - 2 ~= 2 * #KEYS then
  return redis.error_reply('want two numbers per key')
end
local cost = tonumber(ARGV[1])
for i = 1, #KEYS do
  local used = tonumber(redis.call('GET', KEYS[i]) or '0')
  if used + cost > tonumber(ARGV[1 + 2 * i]) then
    return {false}
  end
end
for i = 1, #KEYS do
  redis.call('INCRBY', KEYS[i], cost)
  redis.call('PEXPIRE', KEYS[i], math.ceil(tonumber(ARGV[2 + 2 * i]) / 1000))
end
return {true}
