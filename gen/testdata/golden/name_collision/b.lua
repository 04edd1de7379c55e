-- Generates RateKeys, which a.lua generates as a type.
-- @script rate_keys
-- @return n int
return {1}
