-- StreamClaim hands a consumer of a stream's group the next message to
-- work on: one another consumer took but left unacknowledged for
-- min_idle_ms (it crashed or hangs), else a new one. A message delivered
-- max_deliveries times already goes to the dead-letter list instead, so
-- that one poisonous message cannot stall the group.
--
-- @script stream_claim
-- @key stream              the work queue; its producer creates it and the group
-- @key dead                dead-letter list of "ID PAYLOAD", kept a week after the last move
-- @arg group string
-- @arg consumer string
-- @arg min_idle_ms int     how long a message stays with a silent consumer, >= 0
-- @arg max_deliveries int  deliveries after which a message is dead, >= 1
-- @return id string        the message to work on; "" when there is none
-- @return job string       its "job" field
-- @return dead int         messages this call moved to the dead letters
local WEEK = 604800000
local stream, dead = KEYS[1], KEYS[1] .. ':dead'
local group, consumer = ARGV[1], ARGV[2]
local idle, max_deliveries = tonumber(ARGV[3]), tonumber(ARGV[4])
if group == '' or consumer == '' or not idle or idle < 0 or not max_deliveries or max_deliveries < 1 then
  return redis.error_reply('ERR stream_claim: want a group, a consumer, min_idle_ms >= 0 and max_deliveries >= 1')
end
if redis.call('EXISTS', stream) == 0 then
  return {'', '', 0}
end

local function field(values, name)
  for i = 1, #values, 2 do
    if values[i] == name then
      return values[i + 1]
    end
  end
  return ''
end

local pending = redis.pcall('XPENDING', stream, group, 'IDLE', idle, '-', '+', 100)
if pending.err then
  return redis.error_reply('ERR stream_claim: ' .. pending.err)
end
local moved = 0
for _, p in ipairs(pending) do
  if p[4] >= max_deliveries then
    local entry = redis.call('XRANGE', stream, p[1], p[1])[1]
    redis.call('RPUSH', dead, p[1] .. ' ' .. (entry and field(entry[2], 'job') or ''))
    redis.call('XACK', stream, group, p[1])
    moved = moved + 1
  end
end
if moved > 0 then
  redis.call('PEXPIRE', dead, WEEK)
end

local entry = redis.call('XAUTOCLAIM', stream, group, consumer, idle, '0-0', 'COUNT', 1)[2][1]
if not entry then
  local read = redis.call('XREADGROUP', 'GROUP', group, consumer, 'COUNT', 1, 'STREAMS', stream, '>')
  entry = read and read[1][2][1]
end
if not entry then
  return {'', '', moved}
end
return {entry[1], field(entry[2], 'job'), moved}
