package verify_test

import (
	"strings"
	"testing"

	"github.com/sluice-go/sluice/verify"
)

// vetLines vets src (as t.lua, without a step file) and returns its
// findings, one per line.
func vetLines(src string) string {
	return findingLines(verify.VetSource("t.lua", []byte(src), nil))
}

// TestVetTTLIdioms: the INCR-then-expire-when-new idiom and its variants
// give the key a TTL in the run that creates it, and later runs keep it:
// no finding. The same scripts with the TTL missing, or given too late, or
// cleared by a later SET, are caught at the write, and the message names
// the command the script uses for TTLs.
func TestVetTTLIdioms(t *testing.T) {
	header := "-- @script s\n-- @key counter\n-- @return n int\n"
	for _, c := range []struct {
		name, body, want string
	}{
		{"EXPIRE when new", "local n = redis.call('INCR', KEYS[1])\nif n == 1 then redis.call('EXPIRE', KEYS[1], 60) end\nreturn {n}", ""},
		{"PEXPIRE when new", "local n = redis.call('INCRBY', KEYS[1], 5)\nif n == 5 then redis.call('PEXPIRE', KEYS[1], 60000) end\nreturn {n}", ""},
		{"SET EX NX first", "redis.call('SET', KEYS[1], 0, 'EX', 60, 'NX')\nreturn {redis.call('INCR', KEYS[1])}", ""},
		{"SET PX NX first", "redis.call('SET', KEYS[1], 0, 'NX', 'PX', 60000)\nreturn {redis.call('INCR', KEYS[1])}", ""},
		{"GETEX when new", "local n = redis.call('INCR', KEYS[1])\nif n == 1 then redis.call('GETEX', KEYS[1], 'PX', 60000) end\nreturn {n}", ""},
		{"EXPIRE NX every time", "local n = redis.call('INCR', KEYS[1])\nredis.call('EXPIRE', KEYS[1], 60, 'NX')\nreturn {n}", ""},
		{"SET KEEPTTL", "if redis.call('SET', KEYS[1], 1, 'NX', 'PX', 60000) then return {1} end\nredis.call('SET', KEYS[1], 2, 'KEEPTTL')\nreturn {2}", ""},

		{"no TTL at all", "local n = redis.call('INCR', KEYS[1])\nreturn {n}",
			`t.lua:4:11: INCR writes key "{vet}:counter" and leaves it without a TTL: it would stay forever (give it one with PEXPIRE or EXPIRE after the write) (no-ttl)`},
		{"TTL on the second hit", "local n = redis.call('INCR', KEYS[1])\nif n == 2 then redis.call('EXPIRE', KEYS[1], 60) end\nreturn {n}",
			`t.lua:4:11: INCR writes key "{vet}:counter" and leaves it without a TTL: it would stay forever (give it one with EXPIRE, as line 5 does) (no-ttl)`},
		{"SET without KEEPTTL", "if redis.call('SET', KEYS[1], 1, 'NX', 'PX', 60000) then return {1} end\nredis.call('SET', KEYS[1], 2)\nreturn {2}",
			`t.lua:5:1: SET clears the TTL of key "{vet}:counter" and nothing gives it a new one: it would stay forever (add KEEPTTL to keep the TTL, or PX or EX to give a new one) (no-ttl)`},
		{"KEEPTTL on a new key", "redis.call('SET', KEYS[1], 2, 'KEEPTTL')\nreturn {2}",
			`t.lua:4:1: SET writes key "{vet}:counter" and leaves it without a TTL: it would stay forever (add PX or EX to the SET, or PEXPIRE after it) (no-ttl)`},
		{"PERSIST", "redis.call('SET', KEYS[1], 1, 'PX', 60000)\nredis.call('PERSIST', KEYS[1])\nreturn {1}",
			`t.lua:5:1: PERSIST writes key "{vet}:counter" and leaves it without a TTL: it would stay forever (give it one with SET ... PX, as line 4 does) (no-ttl)`},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := strings.TrimSpace(vetLines(header + c.body))
			if got != c.want {
				t.Errorf("vet:\n%s\nwant:\n%s", got, c.want)
			}
		})
	}
}

// TestVetExploresBranches: without a step file, vet still reaches code
// behind arguments that differ from each other and behind keys that exist.
func TestVetExploresBranches(t *testing.T) {
	for _, c := range []struct {
		name, src, want string
	}{
		{"arguments that differ", `-- @script s
-- @arg a int
-- @arg b int
-- @arg c int
-- @return r int
return {(tonumber(ARGV[1]) - tonumber(ARGV[2])) / tonumber(ARGV[3])}`,
			`t.lua:6:1: reply element 1 (r) is 1.75, not an integer: Redis replies 1 (keep arithmetic in integers; math.floor, or return a string) (float-reply)`},
		{"a key that exists", `-- @script s
-- @key k
-- @return r int
local v = redis.call('GET', KEYS[1])
if v then
  return {tonumber(v) / 2}
end
return {0}`,
			`t.lua:6:3: reply element 1 (r) is 3.5, not an integer: Redis replies 3 (keep arithmetic in integers; math.floor, or return a string) (float-reply)`},
		{"hash fields equal to the arguments", `-- @script s
-- @key lock
-- @key log
-- @arg owner string
-- @arg token int
-- @return released bool
local v = redis.call('HMGET', KEYS[1], 'owner', 'token')
if v[1] == ARGV[1] and v[2] == ARGV[2] then
  redis.call('DEL', KEYS[1])
  redis.call('RPUSH', KEYS[2], ARGV[1])
  return {true}
end
return {false}`,
			`t.lua:10:3: RPUSH writes key "{vet}:log" and leaves it without a TTL: it would stay forever (give it one with PEXPIRE or EXPIRE after the write) (no-ttl)`},
		{"an optional argument that is set", `-- @script s
-- @arg now int?
-- @return r int
local now = tonumber(ARGV[1])
if now then
  return {now / 4}
end
return {0}`,
			`t.lua:6:3: reply element 1 (r) is 2.5, not an integer: Redis replies 2 (keep arithmetic in integers; math.floor, or return a string) (float-reply)`},
		{"zero", `-- @script s
-- @arg n int
-- @return r int
local n = tonumber(ARGV[1])
if n == 0 then
  return {1 / 2}
end
return {n}`,
			`t.lua:6:3: reply element 1 (r) is 0.5, not an integer: Redis replies 0 (keep arithmetic in integers; math.floor, or return a string) (float-reply)`},
		{"a sorted set member", `-- @script s
-- @key board
-- @arg member string
-- @return rank int
local r = redis.call('ZREVRANK', KEYS[1], ARGV[1])
if r then
  return {r + 0.5}
end
return {-1}`,
			`t.lua:7:3: reply element 1 (rank) is 3.5, not an integer: Redis replies 3 (keep arithmetic in integers; math.floor, or return a string) (float-reply)`},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := strings.TrimSpace(vetLines(c.src))
			if got != c.want {
				t.Errorf("vet:\n%s\nwant:\n%s", got, c.want)
			}
		})
	}
}

// TestVetVariadic: a variadic key and a list argument cover every KEYS and
// ARGV entry from their position on, and vet's made-up runs send none, one
// and a few of them.
func TestVetVariadic(t *testing.T) {
	for _, c := range []struct {
		name, src, want string
	}{
		{"list read past its start", `-- @script s
-- @key state
-- @arg cost int
-- @arg now int?
-- @arg limits int...
-- @return n int
local n = 0
for i = 3, #ARGV do n = n + tonumber(ARGV[i]) end
redis.call('SET', KEYS[1], ARGV[1] .. ARGV[2] .. (ARGV[3] or '') .. (ARGV[5] or ''), 'PX', 1000)
return {n}`, ``},
		{"variadic key read past its start", `-- @script s
-- @key lock
-- @key shards...
-- @return n int
redis.call('SET', KEYS[1], 1, 'PX', 1000)
if KEYS[4] then redis.call('SET', KEYS[4], 1, 'PX', 1000) end
return {#KEYS}`, ``},
		{"literal index past a fixed list", `-- @script s
-- @arg a int
-- @arg b int
-- @return n int
return {tonumber(ARGV[1]) + tonumber(ARGV[2]) + tonumber(ARGV[3] or 0)}`,
			`t.lua:5:58: ARGV[3] is not declared: the header has 2 @arg line(s) (undeclared-input)`},
		{"list never read", `-- @script s
-- @key k
-- @arg a int
-- @arg rest int...
-- @return n int
redis.call('SET', KEYS[1], ARGV[1], 'PX', 1000)
return {1}`,
			`t.lua:4:9: @arg rest... is ARGV[2..n], which the script never reads (unused-input)`},
		{"variadic key never read", `-- @script s
-- @key k
-- @key more...
-- @return n int
redis.call('SET', KEYS[1], 1, 'PX', 1000)
return {1}`,
			`t.lua:3:9: @key more... is KEYS[2..n], which the script never reads (unused-input)`},
		{"index zero", `-- @script s
-- @key k...
-- @return n int
return {KEYS[0] and 1 or #KEYS}`,
			`t.lua:4:9: KEYS[0] is never set: KEYS starts at KEYS[1] (undeclared-input)`},
		{"runs with none, one and a few keys and elements", `-- @script s
-- @key states...
-- @arg cost int
-- @arg limits int...
-- @return n int
if #KEYS == 0 and #ARGV == 1 then none = 1 end
if #KEYS == 1 and #ARGV == 2 then one = 1 end
if #KEYS == 3 and #ARGV == 10 then three_per_key = 1 end
for i = 1, #KEYS do
  redis.call('INCRBY', KEYS[i], ARGV[1])
  redis.call('PEXPIRE', KEYS[i], 1000)
end
return {#KEYS}`,
			`t.lua:6:35: assignment to global none: Redis scripts cannot create or change globals (declare it local) (global-write)
t.lua:7:35: assignment to global one: Redis scripts cannot create or change globals (declare it local) (global-write)
t.lua:8:36: assignment to global three_per_key: Redis scripts cannot create or change globals (declare it local) (global-write)`},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := strings.TrimSpace(vetLines(c.src))
			if got != c.want {
				t.Errorf("vet:\n%s\nwant:\n%s", got, c.want)
			}
		})
	}
}
