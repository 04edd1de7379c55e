-- @script rate
-- @return n int
return {1}
