-- Reports the time left in a window, in ms.
--
-- @script left
-- @arg window int   µs
-- @arg now int      µs
-- @return left_ms int

local window = tonumber(ARGV[1])
local now = tonumber(ARGV[2])
local left = window - now % window
return {left / 1000}
