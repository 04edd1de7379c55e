-- DocUpdate merges a JSON object of changes into a JSON document kept as a
-- string, and removes the members named in remove, with optimistic
-- concurrency: the caller sends the version it read, and the update is
-- refused when someone wrote in between.
--
-- @script doc_update
-- @key doc               the document: a JSON object with a "_v" version
-- @arg patch string      JSON object of the members to set
-- @arg version int       the version the caller read; 0 creates the document
-- @arg ttl_ms int        the document expires this long after its last update
-- @arg remove string...  members to remove
-- @return ok bool
-- @return version int    the document's version after the call
-- @return doc string     the document after the call, as JSON
local ok, patch = pcall(cjson.decode, ARGV[1])
if not ok or type(patch) ~= 'table' then
  return redis.error_reply('ERR doc_update: patch must be a JSON object')
end
local want, ttl = tonumber(ARGV[2]), tonumber(ARGV[3])
if not want or want < 0 or not ttl or ttl < 1 then
  return redis.error_reply('ERR doc_update: want version >= 0 and ttl_ms >= 1')
end
raw = redis.call('GET', KEYS[1])
local doc = {_v = 0}
if raw then
  doc = cjson.decode(raw)
end
if doc._v ~= want then
  return {false, doc._v, raw or cjson.encode(doc)}
end
for k, v in pairs(patch) do
  doc[k] = v
end
for i = 4, #ARGV do
  doc[ARGV[i]] = nil
end
doc._v = want + 1
local out = cjson.encode(doc)
redis.call('SET', KEYS[1], out, 'PX', ttl)
return {true, doc._v, out}
