-- @script ping
return redis.call('PING')
