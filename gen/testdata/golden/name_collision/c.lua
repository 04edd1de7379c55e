-- Same name as a.lua.
-- @script rate
-- @return n int
return {1}
