-- TokenBucket takes tokens from a bucket refilled at a steady rate. The doc
-- starts with the Go name, so it is used as it is.
--
-- Second paragraph.
-- @script token_bucket
-- @key bucket
-- @arg take int
-- @return left int
return {tonumber(ARGV[1])}
