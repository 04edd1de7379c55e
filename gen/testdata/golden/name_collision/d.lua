-- Fine on its own.
-- @script other
-- @return n int
return {1}
