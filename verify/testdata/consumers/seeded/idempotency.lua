-- Idempotency records the outcome of a request under its idempotency key,
-- so that a retried request gets the first outcome instead of running
-- twice. A call without a response claims the key, or says it is claimed
-- (pending) or done; a call with the response completes a claimed key. The
-- entry lives ttl_ms from the claim; completing it keeps that TTL.
--
-- @script idempotency
-- @key entry                "pending:FINGERPRINT" or "done:FINGERPRINT:RESPONSE"
-- @arg fingerprint string   hex hash of the request; a retry sends the same
-- @arg ttl_ms int           how long the entry is kept after the claim, >= 1
-- @arg response string?     the outcome, to complete the claimed entry
-- @return state string      new, pending, done, mismatch (another request has the key) or expired
-- @return response string   the recorded outcome when done, else ""
local fp, ttl, response = ARGV[1], tonumber(ARGV[2]), ARGV[3]
if not string.find(fp, '^%x+$') or not ttl or ttl < 1 then
  return redis.error_reply('ERR idempotency: want a hex fingerprint and ttl_ms >= 1')
end
local cur = redis.call('GET', KEYS[1])
if not cur then
  if response ~= '' then
    return {'expired', ''}
  end
  redis.call('SET', KEYS[1], 'pending:' .. fp, 'PX', ttl)
  return {'new', ''}
end
local state, seen, saved = string.match(cur, '^(%a+):(%x+):?(.*)$')
if seen ~= fp then
  return {'mismatch', ''}
end
if state == 'pending' and response ~= '' then
  redis.call('SET', KEYS[1], 'done:' .. fp .. ':' .. response)
  return {'done', response}
end
return {state, saved}
