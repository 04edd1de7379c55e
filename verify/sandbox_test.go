package verify_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice/verify"
)

// conversion is a script whose reply shows one rule of Redis 7's Lua:
// the sandbox and a real redis-server must both match want (a reply
// pattern; errors match by prefix), and when exact is set the sandbox must
// send the very same reply as the server, error suffix included.
type conversion struct {
	name   string
	script string
	setup  [][]string
	want   string // on Redis 7.0; "" to compare with the server only
	exact  bool
	// wants holds the other servers' replies where they differ from
	// want's (see verify.Server), taken from their sources and, for
	// Valkey 8.0.1, from the server itself.
	wants map[verify.Server]string
}

// wantOn is c's reply on server s.
func (c conversion) wantOn(s verify.Server) string {
	if w, ok := c.wants[s]; ok {
		return w
	}
	return c.want
}

var conversions = []conversion{
	// Lua → RESP.
	{name: "integer", script: "return 42", want: "42", exact: true},
	{name: "float truncated", script: "return 3.99", want: "3", exact: true},
	{name: "negative float truncated toward zero", script: "return -3.99", want: "-3", exact: true},
	{name: "2^53", script: "return 2^53", want: "9007199254740992", exact: true},
	{name: "float out of range", script: "return 1e300", want: "-9223372036854775808", exact: true},
	{name: "NaN", script: "return 0/0", want: "-9223372036854775808", exact: true},
	{name: "string", script: "return 'hi'", want: `"hi"`, exact: true},
	{name: "true", script: "return true", want: "1", exact: true},
	{name: "false", script: "return false", want: "nil", exact: true},
	{name: "nil", script: "return nil", want: "nil", exact: true},
	{name: "no return", script: "local x = 1", want: "nil", exact: true},
	{name: "nested arrays", script: "return {1, 'a', {2, {3}}}", want: `[1, "a", [2, [3]]]`, exact: true},
	{name: "array ends at the first nil", script: "return {1, 2, nil, 4}", want: "[1, 2]", exact: true},
	{name: "false in an array", script: "return {1, false, 3}", want: "[1, nil, 3]", exact: true},
	{name: "floats in an array", script: "return {1.5, -2.5, 2^63}", want: "[1, -2, -9223372036854775808]", exact: true},
	{name: "hash part dropped", script: "return {3, x = 4}", want: "[3]", exact: true},
	{name: "err table", script: "return {err = 'boom'}", want: `err:"boom"`, exact: true},
	{name: "err must be a string", script: "return {err = 3}", want: "[]", exact: true},
	{name: "ok table", script: "return redis.status_reply('FINE')", want: `ok:"FINE"`, exact: true},
	{name: "ok wins over the array", script: "return {ok = 'FINE', 1}", want: `ok:"FINE"`, exact: true},
	{name: "err and ok inside an array", script: "return {1, {err = 'inner'}, {ok = 'st'}}", want: `[1, err:"inner", ok:"st"]`, exact: true},
	{name: "error_reply keeps a code", script: "return redis.error_reply('MY boom')", want: `err:"MY boom"`, exact: true},
	{name: "error_reply adds ERR", script: "return redis.error_reply('boom')", want: `err:"ERR boom"`, exact: true},
	{name: "error_reply with a dash", script: "return redis.error_reply('-X')", want: `err:"ERR X"`, exact: true},
	{name: "error_reply text", script: "return redis.error_reply('MY boom').err", want: `"MY boom"`, exact: true},
	{name: "error_reply needs a string", script: "return redis.error_reply(5)", want: `err:"ERR wrong number or type of arguments"`},
	{name: "newlines in an error", script: "return {err = 'a\\nb'}", want: `err:"a b"`, exact: true},

	// RESP → Lua.
	{name: "status to ok table", script: "local r = redis.call('SET', KEYS[1], 'v') return type(r) .. ':' .. r.ok", want: `"table:OK"`, exact: true},
	{name: "status passed through", script: "return redis.call('SET', KEYS[1], 'v')", want: `ok:"OK"`, exact: true},
	{name: "nil bulk to false", script: "local v = redis.call('GET', KEYS[1]) return type(v) .. ':' .. tostring(v)", want: `"boolean:false"`, exact: true},
	{name: "integer to number", script: "return type(redis.call('INCR', KEYS[1]))", want: `"number"`, exact: true},
	{name: "array to table", script: "redis.call('RPUSH', KEYS[1], 'a', 'b') redis.call('PEXPIRE', KEYS[1], 1000) return redis.call('LRANGE', KEYS[1], 0, -1)", want: `["a", "b"]`, exact: true},
	{name: "nil in an array to false", script: "local t = redis.call('HMGET', KEYS[1], 'a', 'b') return {type(t[1]), #t}", want: `["boolean", 2]`, exact: true},
	{name: "bulk to string", script: "redis.call('SET', KEYS[1], '7') return type(redis.call('GET', KEYS[1]))", want: `"string"`, exact: true},

	// Numbers passed to redis.call: %.17g.
	{name: "number formatting", script: `local out = {}
for _, n in ipairs({0.1, 1/3, 100, 1e20, 2^53 + 1, 1/0, -1/0, 123456789012, 3.5, 1e16, 1e17, 1e-5, 2^63, -2.5, 1e15 + 0.3}) do
  redis.call('SET', KEYS[1], n)
  out[#out + 1] = redis.call('GET', KEYS[1])
end
return out`, want: `["0.10000000000000001", "0.33333333333333331", "100", "1e+20", "9007199254740992", "inf", "-inf", "123456789012", "3.5", "10000000000000000", "1e+17", "1.0000000000000001e-05", "9.2233720368547758e+18", "-2.5", "1000000000000000.2"]`, exact: true,
		wants: map[verify.Server]string{
			verify.Redis72: `["0.1", "0.3333333333333333", "100", "1e+20", "9007199254740992", "inf", "-inf", "123456789012", "3.5", "1e+16", "1e+17", "0.00001", "9223372036854776000", "-2.5", "1000000000000000.2"]`,
			verify.Redis74: `["0.1", "0.3333333333333333", "100", "1e+20", "9007199254740992", "inf", "-inf", "123456789012", "3.5", "10000000000000000", "100000000000000000", "0.00001", "9223372036854776000", "-2.5", "1000000000000000.2"]`,
			verify.Valkey8: `["0.1", "0.3333333333333333", "100", "1e+20", "9007199254740992", "inf", "-inf", "123456789012", "3.5", "10000000000000000", "100000000000000000", "0.00001", "9223372036854776000", "-2.5", "1000000000000000.2"]`,
		}},
	{name: "negative zero formatting", script: "redis.call('SET', KEYS[1], -0.0) return redis.call('GET', KEYS[1])", want: `"-0"`, exact: true,
		wants: map[verify.Server]string{verify.Redis72: `"-0"`, verify.Redis74: `"0"`, verify.Valkey8: `"0"`}},
	{name: "NaN formatting", script: "redis.call('SET', KEYS[1], 0/0) return redis.call('GET', KEYS[1])", exact: true},

	// redis.pcall returns error tables; redis.call raises them.
	{name: "pcall error reply", script: "return redis.pcall('INCR', KEYS[1])", setup: [][]string{{"SET", "k", "x"}}, want: `err:"ERR value is not an integer or out of range"`, exact: true},
	{name: "pcall error table", script: "local t = redis.pcall('INCR', KEYS[1]) return {type(t), t.err}", setup: [][]string{{"SET", "k", "x"}}, want: `["table", "ERR value is not an integer or out of range"]`, exact: true},
	{name: "call raises", script: "\nreturn redis.call('INCR', KEYS[1])", setup: [][]string{{"SET", "k", "x"}}, want: `err:"ERR value is not an integer or out of range"`, exact: true},
	{name: "Lua pcall sees the err text", script: "local ok, e = pcall(redis.call, 'INCR', KEYS[1]) return {tostring(ok), type(e), e}", setup: [][]string{{"SET", "k", "x"}}, want: `["false", "string", "ERR value is not an integer or out of range"]`, exact: true},
	{name: "Lua pcall of an error table", script: "local ok, e = pcall(function() error({err = 'MY x'}) end) return e", want: `"MY x"`, exact: true},
	{name: "unknown command", script: "return redis.pcall('NOPE')", want: `err:"ERR Unknown Redis command called from script"`, exact: true,
		wants: map[verify.Server]string{verify.Valkey8: `err:"ERR Unknown command called from script"`}},
	{name: "bad argument type", script: "return redis.pcall('GET', {})", want: `err:"ERR Lua redis lib command arguments must be strings or integers"`, exact: true,
		wants: map[verify.Server]string{verify.Valkey8: `err:"ERR Command arguments must be strings or integers"`}},
	{name: "no arguments", script: "return redis.pcall()", want: `err:"ERR Please specify at least one argument for this redis lib call"`, exact: true,
		wants: map[verify.Server]string{verify.Valkey8: `err:"ERR Please specify at least one argument for this call"`}},
	{name: "command not allowed", script: "return redis.pcall('MULTI')", want: `err:"ERR This Redis command is not allowed from script"`, exact: true},
	{name: "bad argument raised", script: "return redis.call('GET', true)", want: `err:"ERR Lua redis lib command arguments must be strings or integers"`, exact: true,
		wants: map[verify.Server]string{verify.Valkey8: `err:"ERR Command arguments must be strings or integers"`}},

	// Globals.
	{name: "global write", script: "x = 1 return 1", want: `err:"ERR user_script:1: Attempt to modify a readonly table"`, exact: true},
	{name: "global write through _G", script: "_G.x = 1 return 1", want: `err:"ERR user_script:1: Attempt to modify a readonly table"`, exact: true},
	{name: "global write in a function", script: "local function f()\n  y = 2\nend\nf()\nreturn 1", want: `err:"ERR user_script:2: Attempt to modify a readonly table"`, exact: true},
	{name: "undefined global", script: "return undefined_thing", want: `err:"ERR user_script:1: Script attempted to access nonexistent global variable 'undefined_thing'"`, exact: true},
	{name: "removed globals", script: "return {pcall(function() return print end)}", want: `[nil, "user_script:1: Script attempted to access nonexistent global variable 'print'"]`, exact: true},

	// Errors raised by the script.
	{name: "error string", script: "error('boom')", want: `err:"ERR user_script:1: boom"`, exact: true},
	{name: "error table", script: "\n\nerror({err = 'MY boom'})", want: `err:"MY boom"`, exact: true},
	{name: "syntax error", script: "return 1 +", want: `err:"ERR Error compiling script (new function): user_script:1:"`},

	// The redis library.
	{name: "sha1hex", script: "return {redis.sha1hex(''), redis.sha1hex('abc')}", want: `["da39a3ee5e6b4b0d3255bfef95601890afd80709", "a9993e364706816aba3e25717850c26c9cd0d89d"]`, exact: true},
	{name: "log constants", script: "return {redis.LOG_DEBUG, redis.LOG_VERBOSE, redis.LOG_NOTICE, redis.LOG_WARNING}", want: "[0, 1, 2, 3]", exact: true},
	{name: "log", script: "return redis.log(redis.LOG_WARNING, 'hello', 'there')", want: "nil", exact: true},
	{name: "log level", script: "return redis.log(9, 'x')", want: `err:"ERR Invalid debug level."`, exact: true,
		wants: map[verify.Server]string{verify.Redis74: `err:"ERR Invalid log level."`, verify.Valkey8: `err:"ERR Invalid log level."`}},
	{name: "KEYS and ARGV", script: "return {KEYS[1], ARGV[1], #KEYS, #ARGV}", want: `["k", "a1", 1, 2]`, exact: true},

	// Lua 5.1 behaviour the sandbox mends or shares.
	{name: "tostring of numbers", script: "return {tostring(1/3), tostring(0.1), tostring(1e15), tostring(2^53), tostring(-0.5)}", want: `["0.33333333333333", "0.1", "1e+15", "9.007199254741e+15", "-0.5"]`, exact: true},
	{name: "string.format", script: "return {string.format('%d', 3.7), string.format('%.3f', 1/3), string.format('%5s|', 'ab')}", want: `["3", "0.333", "   ab|"]`, exact: true},
	{name: "tonumber", script: "return {tonumber('12'), tonumber('0x10'), tonumber(' 5 '), tostring(tonumber('x'))}", want: `[12, 16, 5, "nil"]`, exact: true},

	// cjson.
	{name: "cjson.encode", script: "return {cjson.encode(0.1), cjson.encode(1/3), cjson.encode(1e20), cjson.encode(100), cjson.encode('a/b\"\\n'), cjson.encode({}), cjson.encode({1, nil, 3}), cjson.encode(true), cjson.encode({1, 2, {a = 1}}), cjson.encode(12345678901234567)}",
		want: `["0.1", "0.33333333333333", "1e+20", "100", "\"a\\/b\\\"\\n\"", "{}", "[1,null,3]", "true", "[1,2,{\"a\":1}]", "1.2345678901235e+16"]`, exact: true},
	{name: "cjson.decode", script: `local t = cjson.decode('{"a":[1,2.5,"x",null,true],"b":"\\u00e9"}') return {t.a[1], t.a[3], type(t.a[4]), tostring(t.a[5]), #t.a, t.b, t.a[2] * 2}`, want: `[1, "x", "userdata", "true", 5, "é", 5]`, exact: true},
	{name: "cjson.null", script: "return {cjson.encode(cjson.null), cjson.decode('null') == cjson.null}", want: `["null", 1]`, exact: true},
	{name: "cjson refuses inf", script: "return cjson.encode(1/0)", want: `err:"ERR user_script:1: Cannot serialise number: must not be NaN or Inf"`, exact: true},
	{name: "cjson refuses sparse arrays", script: "return cjson.encode({[1] = 1, [30] = 3})", want: `err:"ERR user_script:1: Cannot serialise table: excessively sparse array"`, exact: true},

	// bit.
	{name: "bit", script: "return {bit.band(7, 3), bit.bor(1, 2), bit.bxor(5, 1), bit.lshift(1, 4), bit.rshift(-1, 28), bit.arshift(-16, 2), bit.tohex(255), bit.bnot(0), bit.tobit(2^32 + 5), bit.rol(1, 33), bit.tohex(-1, -4)}", exact: true},
}

// TestSandboxConversions checks every rule of the conversions table on the
// sandbox and on a real redis-server.
// TestServerProfiles pins what the sandbox does as each server, where the
// servers differ (number formatting, error texts), with the golden replies
// of the conversions table; TestSandboxConversions checks the profile of
// the server under test against that server.
func TestServerProfiles(t *testing.T) {
	ctx := context.Background()
	for _, server := range verify.Servers {
		t.Run(string(server), func(t *testing.T) {
			sb := verify.SandboxT(t)
			sb.Server = server
			for _, c := range conversions {
				want := c.wantOn(server)
				if want == "" {
					continue
				}
				if err := sb.Reset(ctx); err != nil {
					t.Fatal(err)
				}
				for _, cmd := range c.setup {
					mustDo(t, sb, cmd...)
				}
				r, err := sb.Eval(ctx, c.script, []string{"k"}, []string{"a1", "a2"})
				if err != nil {
					t.Fatalf("%s: %v", c.name, err)
				}
				if !verify.MustParseReply(want).Match(r) {
					t.Errorf("%s as %s: got %s, want %s", c.name, server, r, want)
				}
			}
		})
	}
	for _, tc := range []struct {
		name, version string
		want          verify.Server
	}{
		{"redis", "7.0.15", verify.Redis70}, {"redis", "7.2.4", verify.Redis72}, {"redis", "7.4.1", verify.Redis74},
		{"redis", "8.0.2", verify.Redis74}, {"valkey", "8.0.1", verify.Valkey8}, {"redis", "6.2.14", verify.Redis70},
	} {
		if got := verify.ServerOf(tc.name, tc.version); got != tc.want {
			t.Errorf("ServerOf(%q, %q) = %s, want %s", tc.name, tc.version, got, tc.want)
		}
	}
}

func TestSandboxConversions(t *testing.T) {
	ctx := context.Background()
	sb := verify.SandboxT(t)
	real := verify.RedisT(t)
	// The sandbox answers as the server under test does: Debian's Redis
	// 7.0 in CI, or whatever SLUICE_REDIS_SERVER names.
	server, err := real.Server(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sb.Server = server
	t.Logf("redis-server is %s", server)
	for _, c := range conversions {
		t.Run(c.name, func(t *testing.T) {
			var got [2]verify.Reply
			for i, env := range []verify.Env{sb, real} {
				if err := env.Reset(ctx); err != nil {
					t.Fatal(err)
				}
				for _, cmd := range c.setup {
					mustDo(t, env, cmd...)
				}
				r, err := env.Eval(ctx, c.script, []string{"k"}, []string{"a1", "a2"})
				if err != nil {
					t.Fatalf("%s: %v", env.Name(), err)
				}
				got[i] = r
				if want := c.wantOn(server); want != "" && !verify.MustParseReply(want).Match(r) {
					t.Errorf("%s: got %s, want %s", env.Name(), r, want)
				}
			}
			if !verify.SameReply(got[0], got[1]) {
				t.Errorf("sandbox %s, redis-server %s", got[0], got[1])
			}
			if c.exact && (got[0].Kind != got[1].Kind || got[0].String() != got[1].String()) {
				t.Errorf("not the same reply:\nsandbox:      %s\nredis-server: %s", got[0], got[1])
			}
		})
	}
}

func TestSandboxTimeFollowsClock(t *testing.T) {
	ctx := context.Background()
	sb := verify.SandboxT(t)
	at := time.Date(2030, 5, 6, 7, 8, 9, 123456000, time.UTC)
	if err := sb.SetTime(ctx, at); err != nil {
		t.Fatal(err)
	}
	r, err := sb.Eval(ctx, "redis.call('SET', KEYS[1], 'v', 'PX', 1000) return redis.call('TIME')", []string{"k"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf(`["%d", "123456"]`, at.Unix()); r.String() != want {
		t.Fatalf("TIME = %s, want %s", r, want)
	}
	if err := sb.SetTime(ctx, at.Add(999*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if got := mustDo(t, sb, "PTTL", "k"); got.Int != 1 {
		t.Errorf("PTTL after 999ms = %s, want 1", got)
	}
	if err := sb.SetTime(ctx, at.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if got := mustDo(t, sb, "EXISTS", "k"); got.Int != 0 {
		t.Errorf("key still there when its TTL is up")
	}
}

// TestSandboxRecordsRun checks the record of a run: each command with its
// line and arguments as sent, the return line, floats in the reply,
// globals and logs.
func TestSandboxRecordsRun(t *testing.T) {
	ctx := context.Background()
	sb := verify.SandboxT(t)
	script := `local function touch(key)
  return redis.call('PEXPIRE', key, 1500.0)
end
redis.call('SET', KEYS[1], 0.5)
touch(KEYS[1])
redis.pcall('INCR', KEYS[1])
redis.log(redis.LOG_NOTICE, 'done', 1)
if ARGV[1] == 'float' then
  return {1, 7 / 2}
end
return {1, 2}`
	run, err := sb.Run(ctx, script, []string{"k"}, []string{"float"})
	if err != nil {
		t.Fatal(err)
	}
	var calls []string
	for _, c := range run.Calls {
		calls = append(calls, strings.Join(append([]string{c.Name()}, c.Args[1:]...), " ")+" @"+itoa(c.Line)+protected(c))
	}
	want := []string{"SET k 0.5 @4", "PEXPIRE k 1500 @2", "INCR k @6 (pcall) -> err:\"ERR value is not an integer or out of range\""}
	if strings.Join(calls, "\n") != strings.Join(want, "\n") {
		t.Errorf("calls:\n%s\nwant:\n%s", strings.Join(calls, "\n"), strings.Join(want, "\n"))
	}
	if run.Reply.String() != "[1, 3]" || run.ReturnLine != 9 {
		t.Errorf("reply %s from line %d, want [1, 3] from line 9", run.Reply, run.ReturnLine)
	}
	if len(run.Floats) != 1 || run.Floats[0].Value != 3.5 || run.Floats[0].Sent != 3 || run.Floats[0].Path[0] != 1 || run.Floats[0].Line != 9 {
		t.Errorf("floats = %+v, want 3.5 sent as 3 at element 1, line 9", run.Floats)
	}
	if len(run.Logs) != 1 || run.Logs[0].Msg != "done 1" || run.Logs[0].Level != 2 || run.Logs[0].Line != 7 {
		t.Errorf("logs = %+v", run.Logs)
	}

	run, err = sb.Run(ctx, "local a = 1\nb = a\nreturn b", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(run.Globals) != 1 || run.Globals[0].Name != "b" || run.Globals[0].Line != 2 || !run.Globals[0].Write {
		t.Errorf("globals = %+v, want a write of b on line 2", run.Globals)
	}
	if run.ErrorLine != 2 || !run.Reply.IsError() {
		t.Errorf("reply %s, error line %d; want an error on line 2", run.Reply, run.ErrorLine)
	}
}

func TestSandboxStopsRunawayScripts(t *testing.T) {
	sb := verify.SandboxT(t)
	sb.Timeout = 50 * time.Millisecond
	_, err := sb.Eval(context.Background(), "while true do end", nil, nil)
	if err == nil || !strings.Contains(err.Error(), "did not finish") {
		t.Fatalf("err = %v, want a script that did not finish", err)
	}
	// The sandbox still works afterwards.
	r, err := sb.Eval(context.Background(), "return 1", nil, nil)
	if err != nil || r.Int != 1 {
		t.Fatalf("after a timeout: %v, %v", r, err)
	}
}

func protected(c verify.Call) string {
	if !c.Protected {
		return ""
	}
	return " (pcall) -> " + c.Reply.String()
}

func itoa(n int) string { return fmt.Sprint(n) }
