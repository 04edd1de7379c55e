-- Leaderboard records a player's score when it beats their best, keeps the
-- best `size` players only, and tells where the player stands.
--
-- @script leaderboard
-- @key board              sorted set: player -> best score
-- @arg player string
-- @arg score int
-- @arg size int            how many players the board keeps, >= 1
-- @arg ttl_ms int          the board expires this long after its last change
-- @return rank int         0-based rank of the player, best first; -1 when not on the board
-- @return best int         the player's best score on the board, or 0
-- @return percentile int   share of the board at or below the player, in percent
local player, score = ARGV[1], tonumber(ARGV[2])
local size, ttl = tonumber(ARGV[3]), tonumber(ARGV[4])
if player == '' or not score or not size or size < 1 or not ttl or ttl < 1 then
  return redis.error_reply('ERR leaderboard: want a player, a score, size >= 1 and ttl_ms >= 1')
end
if redis.call('ZADD', KEYS[1], 'GT', 'CH', score, player) == 1 then
  redis.call('ZREMRANGEBYRANK', KEYS[1], 0, -size - 1)
  redis.call('PEXPIRE', KEYS[1], ttl)
end
local rank = redis.call('ZREVRANK', KEYS[1], player)
if not rank then
  return {-1, 0, 0}
end
local n = redis.call('ZCARD', KEYS[1])
local best = tonumber(redis.call('ZSCORE', KEYS[1], player))
return {rank, best, 100 * (n - rank) / n}
