-- Counts reads several counters at once: their total, then each count in
-- the order of the keys.
--
-- @script counts
-- @readonly
-- @key counters...    one string per counter, in one hash slot
-- @return total int   the sum of the counts
-- @return counts int... each counter's count, in the order of the keys (0 for a missing one)
local total, counts = 0, {}
for i, v in ipairs(redis.call('MGET', unpack(KEYS))) do
  local n = tonumber(v) or 0
  total = total + n
  counts[i] = n
end
local reply = {total}
for i = 1, #counts do
  reply[i + 1] = counts[i]
end
return reply