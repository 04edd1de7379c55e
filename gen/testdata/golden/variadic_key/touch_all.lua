-- @script touch_all
-- @key log           a list recording each touch
-- @key members...
local n = 0
for i = 2, #KEYS do
  n = n + redis.call('TOUCH', KEYS[i])
end
redis.call('RPUSH', KEYS[1], n)
redis.call('PEXPIRE', KEYS[1], 60000)
return n
