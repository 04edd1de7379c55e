-- @script flags
-- @key bits            a bitmap
-- @arg offset int
-- @arg values bool...  one bit each, from offset on
for i = 2, #ARGV do
  redis.call('SETBIT', KEYS[1], tonumber(ARGV[1]) + i - 2, ARGV[i])
end
redis.call('PEXPIRE', KEYS[1], 60000)
return 1
