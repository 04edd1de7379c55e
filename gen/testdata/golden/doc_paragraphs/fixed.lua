-- Charges a fixed window counter.
--
-- Windows are epoch aligned: [kP, (k+1)P). A request of cost c is allowed
-- iff count + c <= limit.
--
--
-- A denied request changes nothing. This paragraph follows two blank lines,
-- which stay one blank line in Go.
--
-- @script fixed_counter
-- @key window
-- @arg limit int
-- @return allowed bool
local n = tonumber(redis.call('GET', KEYS[1]) or '0')
if n + 1 > tonumber(ARGV[1]) then
  return {false}
end
redis.call('INCR', KEYS[1])
return {true}
