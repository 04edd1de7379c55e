-- @script mean
-- @arg samples float...
local sum = 0
for i = 1, #ARGV do
  sum = sum + tonumber(ARGV[i])
end
return tostring(sum / #ARGV)
