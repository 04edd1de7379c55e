-- @script set_all
-- @key targets...
-- @arg values string...  one value per target
for i = 1, #KEYS do
  redis.call('SET', KEYS[i], ARGV[i], 'PX', 60000)
end
return #KEYS
