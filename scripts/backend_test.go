package scripts_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice/internal/redisserver"
)

// A backend is one place the scripts run. Every table and property test
// goes through this interface, so the same cases run on miniredis, on a
// real redis-server and on any other implementation (such as a gopher-lua
// sandbox) that provides these methods.
type backend interface {
	// Name names the backend in test output.
	Name() string
	// SetClock moves the server clock (TIME and key expiry) to now µs since
	// the Unix epoch, where the backend has a settable clock; elsewhere it
	// does nothing and the scripts get the time from their now argument.
	SetClock(now int64)
	// Eval runs the script src with keys and args. Server errors, including
	// the script's error replies, are returned in evalResult.Err; the error
	// result is for failures to talk to the backend.
	Eval(ctx context.Context, src string, keys, args []string) (evalResult, error)
	// Do runs one command, for setup and inspection.
	Do(ctx context.Context, args ...string) (any, error)
	// Writes returns a counter that grows with every write the server
	// makes, and false when the backend has none.
	Writes(ctx context.Context) (int64, bool, error)
}

// evalResult is the outcome of one script call.
type evalResult struct {
	Reply any     // int64, string, nil or []any
	Err   error   // the server's error reply, if any
	PTTL  []int64 // PTTL of each key, read right after the script ran
	// Spread is how many ms the server's clock may have moved from the
	// script to the PTTL reads: 0 when they are exactly what it set.
	Spread int64
}

// ints converts a reply to a list of integers, for comparison with tables.
func (r evalResult) ints() ([]int64, error) {
	if r.Err != nil {
		return nil, r.Err
	}
	arr, ok := r.Reply.([]any)
	if !ok {
		return nil, fmt.Errorf("reply %#v is not an array", r.Reply)
	}
	out := make([]int64, len(arr))
	for i, v := range arr {
		switch v := v.(type) {
		case int64:
			out[i] = v
		case nil:
			out[i] = 0 // Lua false
		default:
			return nil, fmt.Errorf("reply element %d is %#v, not an integer", i+1, v)
		}
	}
	return out, nil
}

// rueidisBackend talks to miniredis or a real redis-server through rueidis.
type rueidisBackend struct {
	name   string
	client rueidis.Client
	mini   *miniredis.Miniredis // nil for a real server
	// pin (real server only) keeps keys from ever expiring by the server's
	// clock: a test whose clock runs far faster or slower than the server's
	// sets it, so that keys do not vanish in the middle of a simulated
	// stretch (the server's clock would expire a 1 ms TTL while the
	// simulated clock has moved 1 µs). The script runs unchanged as the
	// body of a function in a wrapper (see pinned) whose redis.call
	// records a PEXPIRE's TTL instead of setting it; PTTL reports the
	// recorded TTL. The scripts must then treat stale state as empty by
	// themselves and find every key without TTL, restoring it (to the
	// wrapper) on every call.
	pin bool
}

// pinned wraps src so that its redis.call records PEXPIRE instead of
// running it, and returns {reply, {pttl...}}: for each key the TTL in ms
// the script gave it, -2 when the script deleted it, or its PTTL.
func pinned(src string) string {
	return `local real = redis
local ttls = {}
local redis = setmetatable({call = function(cmd, key, ...)
  local c = string.upper(cmd)
  if c == 'PEXPIRE' then
    ttls[key] = tonumber(select(1, ...))
    return 1
  elseif c == 'SET' and select('#', ...) == 3 and string.upper(select(2, ...)) == 'PX' then
    ttls[key] = tonumber(select(3, ...))
    return real.call('SET', key, (select(1, ...)))
  elseif c == 'DEL' then
    ttls[key] = -2
  elseif c == 'PTTL' and real.call('EXISTS', key) == 1 then
    return -1
  end
  return real.call(cmd, key, ...)
end}, {__index = real})
local reply = (function()
` + src + `
end)()
local out = {}
for i, k in ipairs(KEYS) do
  out[i] = ttls[k] or real.call('PTTL', k)
end
return {reply, out}`
}

func (b *rueidisBackend) Name() string { return b.name }

func (b *rueidisBackend) SetClock(now int64) {
	if b.mini != nil {
		b.mini.SetTime(time.UnixMicro(now))
	}
}

func (b *rueidisBackend) eval(src string, keys, args []string) rueidis.Completed {
	return b.client.B().Eval().Script(src).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
}

func (b *rueidisBackend) Eval(ctx context.Context, src string, keys, args []string) (evalResult, error) {
	if b.mini != nil {
		// miniredis' clock stands still between SetClock calls: the PTTLs
		// read after the script are those it set.
		var res evalResult
		reply, err := resultToAny(b.client.Do(ctx, b.eval(src, keys, args)))
		if err != nil {
			if !isServerErr(err) {
				return res, err
			}
			res.Err = err
		}
		res.Reply = reply
		for _, k := range keys {
			ms, err := b.client.Do(ctx, b.client.B().Pttl().Key(k).Build()).AsInt64()
			if err != nil {
				return res, err
			}
			res.PTTL = append(res.PTTL, ms)
		}
		return res, nil
	}
	if b.pin {
		return b.evalPinned(ctx, src, keys, args)
	}
	// A real server's clock runs: read TIME before and after the script and
	// the PTTLs in one transaction. When both TIMEs fall in one millisecond,
	// the PTTLs are exactly what the script set; else each is short of it
	// by at most the milliseconds between them (a loaded machine can hold
	// the transaction up for several).
	var res evalResult
	err := b.client.Dedicated(func(c rueidis.DedicatedClient) error {
		cmds := rueidis.Commands{c.B().Multi().Build(), c.B().Time().Build(), b.eval(src, keys, args)}
		for _, k := range keys {
			cmds = append(cmds, c.B().Pttl().Key(k).Build())
		}
		cmds = append(cmds, c.B().Time().Build(), c.B().Exec().Build())
		out := c.DoMulti(ctx, cmds...)
		for _, r := range out[:len(out)-1] {
			if err := r.Error(); err != nil && !isServerErr(err) {
				return err
			}
		}
		items, err := out[len(out)-1].ToArray()
		if err != nil {
			return fmt.Errorf("EXEC: %w", err)
		}
		if len(items) != len(keys)+3 {
			return fmt.Errorf("EXEC returned %d replies, want %d", len(items), len(keys)+3)
		}
		t0, err := timeMicros(items[0])
		if err != nil {
			return err
		}
		res.Reply, res.Err = toAny(&items[1])
		for i := range keys {
			ms, err := items[2+i].AsInt64()
			if err != nil {
				return err
			}
			res.PTTL = append(res.PTTL, ms)
		}
		t1, err := timeMicros(items[len(items)-1])
		if err != nil {
			return err
		}
		res.Spread = t1/1000 - t0/1000
		return nil
	})
	return res, err
}

func (b *rueidisBackend) evalPinned(ctx context.Context, src string, keys, args []string) (evalResult, error) {
	var res evalResult
	out, err := resultToAny(b.client.Do(ctx, b.eval(pinned(src), keys, args)))
	if err != nil {
		if !isServerErr(err) {
			return res, err
		}
		res.Err = err
		return res, nil
	}
	arr, ok := out.([]any)
	if !ok || len(arr) != 2 {
		return res, fmt.Errorf("pinned reply %#v", out)
	}
	res.Reply = arr[0]
	ttls, _ := arr[1].([]any)
	for _, v := range ttls {
		n, _ := v.(int64)
		res.PTTL = append(res.PTTL, n)
	}
	return res, nil
}

func (b *rueidisBackend) Do(ctx context.Context, args ...string) (any, error) {
	return resultToAny(b.client.Do(ctx, b.client.B().Arbitrary(args...).Build()))
}

func (b *rueidisBackend) Writes(ctx context.Context) (int64, bool, error) {
	if b.mini != nil {
		return 0, false, nil
	}
	info, err := b.client.Do(ctx, b.client.B().Info().Section("persistence").Build()).ToString()
	if err != nil {
		return 0, false, err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "rdb_changes_since_last_save:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			return n, true, err
		}
	}
	return 0, false, errors.New("INFO persistence has no rdb_changes_since_last_save")
}

// resultToAny converts a reply to int64, string, nil or []any. A server
// error is returned as the error.
func resultToAny(r rueidis.RedisResult) (any, error) {
	if err := r.NonRedisError(); err != nil {
		return nil, err
	}
	m, _ := r.ToMessage()
	return toAny(&m)
}

func toAny(m *rueidis.RedisMessage) (any, error) {
	if m.IsNil() {
		return nil, nil
	}
	if err := m.Error(); err != nil {
		return nil, err
	}
	switch {
	case m.IsInt64():
		return m.AsInt64()
	case m.IsString():
		return m.ToString()
	case m.IsFloat64(): // RESP3 doubles, e.g. sorted set scores
		f, err := m.AsFloat64()
		return strconv.FormatFloat(f, 'f', -1, 64), err
	case m.IsMap(): // RESP3 maps, e.g. HGETALL: flattened as in RESP2
		kvs, err := m.ToMap()
		if err != nil {
			return nil, err
		}
		keys := make([]string, 0, len(kvs))
		for k := range kvs {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		out := make([]any, 0, 2*len(kvs))
		for _, k := range keys {
			m := kvs[k]
			v, err := toAny(&m)
			if err != nil {
				return nil, err
			}
			out = append(out, k, v)
		}
		return out, nil
	case m.IsArray():
		items, err := m.ToArray()
		if err != nil {
			return nil, err
		}
		out := make([]any, len(items))
		for i := range items {
			if out[i], err = toAny(&items[i]); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("unexpected reply %v", m)
}

func isServerErr(err error) bool {
	_, ok := rueidis.IsRedisErr(err)
	return ok
}

func timeMicros(m rueidis.RedisMessage) (int64, error) {
	parts, err := m.AsStrSlice()
	if err != nil || len(parts) != 2 {
		return 0, fmt.Errorf("TIME reply %v: %v", m, err)
	}
	sec, err1 := strconv.ParseInt(parts[0], 10, 64)
	usec, err2 := strconv.ParseInt(parts[1], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return sec*1_000_000 + usec, nil
}

// newMiniredis returns a backend on a fresh miniredis whose TTLs follow
// SetClock.
func newMiniredis(t testing.TB) *rueidisBackend {
	t.Helper()
	m := miniredis.RunT(t)
	m.ClockTTL(true)
	c, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress:       []string{m.Addr()},
		DisableCache:      true,
		ForceSingleClient: true,
	})
	if err != nil {
		t.Fatalf("rueidis client for miniredis: %v", err)
	}
	t.Cleanup(c.Close)
	return &rueidisBackend{name: "miniredis", client: c, mini: m}
}

// newRedis returns a backend on a private redis-server and a client for it,
// or nil when redis-server is missing and the test runs outside CI (the
// caller then runs on miniredis only). In CI a missing server fails the
// test.
func newRedis(t testing.TB) *rueidisBackend {
	t.Helper()
	if _, err := redisserver.Binary(); err != nil && os.Getenv("CI") != "true" {
		t.Logf("redis-server not found (%v): running on miniredis only", err)
		return nil
	}
	s := redisserver.Start(t)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{s.Addr}, DisableCache: true})
	if err != nil {
		t.Fatalf("rueidis client for %s: %v", s.Addr, err)
	}
	t.Cleanup(c.Close)
	return &rueidisBackend{name: "redis", client: c}
}

// backends returns miniredis, the verify sandbox and, when available, a
// real redis-server.
func backends(t testing.TB) []backend {
	t.Helper()
	bs := []backend{newMiniredis(t), newSandbox(t)}
	if r := newRedis(t); r != nil {
		bs = append(bs, r)
	}
	return bs
}

var (
	sourcesMu sync.Mutex
	sources   = map[string]string{}
)

// source returns the Lua source of the built-in script name (its file
// without .lua).
func source(t testing.TB, name string) string {
	t.Helper()
	sourcesMu.Lock()
	defer sourcesMu.Unlock()
	if s, ok := sources[name]; ok {
		return s
	}
	b, err := os.ReadFile(name + ".lua")
	if err != nil {
		t.Fatalf("reading script: %v", err)
	}
	sources[name] = string(b)
	return string(b)
}

// snapshot describes a key's value and TTL, to check that a call wrote
// nothing on a backend without a write counter.
func snapshot(ctx context.Context, t testing.TB, b backend, key string) string {
	t.Helper()
	typ, err := b.Do(ctx, "TYPE", key)
	if err != nil {
		t.Fatalf("TYPE %s: %v", key, err)
	}
	var val any
	switch typ {
	case "none":
	case "string":
		val, err = b.Do(ctx, "GET", key)
	case "hash":
		var all any
		all, err = b.Do(ctx, "HGETALL", key)
		if arr, ok := all.([]any); ok {
			pairs := make([]string, 0, len(arr)/2)
			for i := 0; i+1 < len(arr); i += 2 {
				pairs = append(pairs, fmt.Sprint(arr[i], "=", arr[i+1]))
			}
			sort.Strings(pairs)
			val = pairs
		}
	case "zset":
		val, err = b.Do(ctx, "ZRANGE", key, "0", "-1", "WITHSCORES")
	default:
		t.Fatalf("key %s has unexpected type %v", key, typ)
	}
	if err != nil {
		t.Fatalf("reading %s: %v", key, err)
	}
	ttl, err := b.Do(ctx, "PTTL", key)
	if err != nil {
		t.Fatalf("PTTL %s: %v", key, err)
	}
	return fmt.Sprintf("%v %v pttl=%v", typ, val, ttl)
}

// ttlMillis is the TTL in ms every script gives a key of useful life lifeUS
// > 0 µs: rounded up to whole ms, and at least 2 ms (Redis expires keys at
// whole ms, so 1 ms can end at once).
func ttlMillis(lifeUS int64) int64 { return max((lifeUS+999)/1000, 2) }

// wantTTL checks that a key's PTTL, read right after a call, is its useful
// life of lifeUS µs rounded up to whole ms and at least 2 ms, or that the
// key is gone when its life is over. On a real server's running clock a
// PTTL read spread ms after the script ran may be that much less.
func wantTTL(t testing.TB, what string, got, lifeUS, spread int64) {
	t.Helper()
	if lifeUS <= 0 {
		if got != -2 {
			t.Errorf("%s: PTTL %d, want the key gone (useful life %d µs)", what, got, lifeUS)
		}
		return
	}
	want := ttlMillis(lifeUS)
	if got <= want && got >= want-spread {
		return
	}
	t.Errorf("%s: PTTL %d ms, want %d ms (useful life %d µs rounded up, at least 2 ms; less by at most %d ms, the server's clock's move while it was read)", what, got, want, lifeUS, spread)
}
