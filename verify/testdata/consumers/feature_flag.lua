-- FeatureFlag reads, and optionally sets, one feature flag of a tenant:
-- each tenant has a bitmap with one bit per feature. It also counts the
-- tenant's flags that are on.
--
-- @script feature_flag
-- @key flags          the tenant's bitmap
-- @arg feature int    bit position of the feature, 0 to 1023
-- @arg ttl_ms int     the bitmap expires this long after it was last set
-- @arg on bool?       set the flag to this; unset: only read it
-- @return on bool     the flag after the call
-- @return changed bool
-- @return count int   the tenant's flags that are on
local feature, ttl = tonumber(ARGV[1]), tonumber(ARGV[2])
local on = ARGV[3]
if not feature or feature < 0 or feature > 1023 or feature ~= math.floor(feature) or not ttl or ttl < 1 then
  return redis.error_reply('ERR feature_flag: want feature 0 to 1023 and ttl_ms >= 1')
end
local changed = false
if on == '1' or on == '0' then
  changed = redis.call('SETBIT', KEYS[1], feature, on) ~= tonumber(on)
  redis.call('PEXPIRE', KEYS[1], ttl)
elseif on ~= '' then
  return redis.error_reply('ERR feature_flag: on must be 1, 0 or unset')
end
return {redis.call('GETBIT', KEYS[1], feature) == 1, changed, redis.call('BITCOUNT', KEYS[1])}
