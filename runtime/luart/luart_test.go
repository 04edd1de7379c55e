package luart_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice/internal/allocs"
	"github.com/sluice-go/sluice/internal/redisserver"
	"github.com/sluice-go/sluice/runtime/luart"
)

// The version handshake must accept the version luagen writes today.
const (
	_ = luart.EnforceVersion(luart.GenVersion - luart.MinVersion)
	_ = luart.EnforceVersion(luart.MaxVersion - luart.GenVersion)
)

func script(name, src string, ro bool) *luart.Script {
	sum := sha1.Sum([]byte(src)) // test-only: the generator computes this at generation time
	return &luart.Script{Name: name, Source: src, SHA1: hex.EncodeToString(sum[:]), ReadOnly: ro}
}

var (
	incr   = script("incr", "return {redis.call('INCRBY', KEYS[1], ARGV[1]), 1}", false)
	echo   = script("echo", "return {ARGV[1], KEYS[1]}", false)
	getRO  = script("get_ro", "return {redis.call('GET', KEYS[1]) or 'none'}", true)
	boom   = script("boom", "return redis.error_reply('ERR sluice: boom')", false)
	shapes = script("shapes", `
if ARGV[1] == 'scalar' then return 7 end
if ARGV[1] == 'short' then return {1} end
if ARGV[1] == 'types' then return {'x', 2, 'y'} end
if ARGV[1] == 'bools' then return {true, false, 1, 0} end
if ARGV[1] == 'badbool' then return {5, 0, 0, 0} end
return {1, 2, 3}`, false)
)

// counting wraps a client and records every command sent.
type counting struct {
	rueidis.CommandClient
	mu      sync.Mutex
	doMulti int
	names   []string
}

func (c *counting) record(cmds ...rueidis.Completed) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cmd := range cmds {
		c.names = append(c.names, cmd.Commands()[0])
	}
}

func (c *counting) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	c.record(cmd)
	return c.CommandClient.Do(ctx, cmd)
}

func (c *counting) DoMulti(ctx context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
	c.record(cmds...)
	c.mu.Lock()
	c.doMulti++
	c.mu.Unlock()
	return c.CommandClient.DoMulti(ctx, cmds...)
}

func (c *counting) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.doMulti = 0
	c.names = nil
}

func (c *counting) sent() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.names, " ")
}

type backend struct {
	name   string
	client rueidis.Client
	flush  func(t *testing.T)
}

func newClient(t *testing.T, opt rueidis.ClientOption) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(opt)
	if err != nil {
		t.Fatalf("rueidis.NewClient: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

func miniBackend(t *testing.T) backend {
	m := miniredis.RunT(t)
	c := newClient(t, rueidis.ClientOption{InitAddress: []string{m.Addr()}, DisableCache: true, ForceSingleClient: true})
	return backend{name: "miniredis", client: c, flush: func(t *testing.T) { m.FlushAll(); flushScripts(t, c) }}
}

func realBackend(t *testing.T) backend {
	s := redisserver.Start(t)
	c := newClient(t, rueidis.ClientOption{InitAddress: []string{s.Addr}, DisableCache: true})
	return backend{name: "redis", client: c, flush: func(t *testing.T) { flushScripts(t, c) }}
}

func flushScripts(t *testing.T, c rueidis.Client) {
	t.Helper()
	if err := c.Do(context.Background(), c.B().ScriptFlush().Build()).Error(); err != nil {
		t.Fatalf("SCRIPT FLUSH: %v", err)
	}
}

func backends(t *testing.T) []backend {
	return []backend{miniBackend(t), realBackend(t)}
}

func decodeInts(t *testing.T, r rueidis.RedisResult, n int) []int64 {
	t.Helper()
	d := luart.NewDecoder(nil, r, n)
	out := make([]int64, n)
	for i := range out {
		out[i] = d.Int(i, fmt.Sprint(i))
	}
	if err := d.Err(); err != nil {
		t.Fatalf("decode: %v", err)
	}
	return out
}

func TestDoLoadsOnNoScriptThenUsesEvalsha(t *testing.T) {
	ctx := context.Background()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			c := &counting{CommandClient: b.client}
			call := luart.Call{Script: incr, Keys: []string{"k"}, Args: []string{"2"}}

			got := decodeInts(t, luart.Do(ctx, c, call), 2)
			if got[0] != 2 {
				t.Fatalf("first call: got %v, want INCRBY result 2", got)
			}
			if s := c.sent(); s != "EVALSHA EVAL" {
				t.Fatalf("first call sent %q, want EVALSHA then EVAL", s)
			}
			c.reset()
			got = decodeInts(t, luart.Do(ctx, c, call), 2)
			if got[0] != 4 || c.sent() != "EVALSHA" {
				t.Fatalf("second call: got %v sending %q, want 4 with EVALSHA only", got, c.sent())
			}

			// After SCRIPT FLUSH the next call recovers silently.
			flushScripts(t, b.client)
			c.reset()
			got = decodeInts(t, luart.Do(ctx, c, call), 2)
			if got[0] != 6 || c.sent() != "EVALSHA EVAL" {
				t.Fatalf("after SCRIPT FLUSH: got %v sending %q, want 6 with EVALSHA then EVAL", got, c.sent())
			}
		})
	}
}

func TestReadOnlyScriptsUseROCommands(t *testing.T) {
	ctx := context.Background()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			c := &counting{CommandClient: b.client}
			call := luart.Call{Script: getRO, Keys: []string{"ro"}}
			d := luart.NewDecoder(getRO, luart.Do(ctx, c, call), 1)
			if v := d.String(0, "v"); d.Err() != nil || v != "none" {
				t.Fatalf("got %q, %v; want none", v, d.Err())
			}
			if s := c.sent(); s != "EVALSHA_RO EVAL_RO" {
				t.Fatalf("sent %q, want EVALSHA_RO then EVAL_RO", s)
			}
		})
	}
}

func TestLoadMatchesGeneratedSHA1(t *testing.T) {
	ctx := context.Background()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			if err := luart.Load(ctx, b.client, incr, echo, getRO); err != nil {
				t.Fatalf("Load: %v", err)
			}
			bad := *incr
			bad.SHA1 = strings.Repeat("0", 40)
			err := luart.Load(ctx, b.client, &bad)
			if err == nil || !strings.Contains(err.Error(), "luart: incr: server SHA1") {
				t.Fatalf("Load with a wrong SHA1: got %v, want a mismatch error", err)
			}
		})
	}
}

func TestServerErrorsAreWrapped(t *testing.T) {
	ctx := context.Background()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			d := luart.NewDecoder(boom, luart.Do(ctx, b.client, luart.Call{Script: boom}), 1)
			err := d.Err()
			if err == nil || !strings.HasPrefix(err.Error(), "luart: boom: ") || !strings.Contains(err.Error(), "sluice: boom") {
				t.Fatalf("got %v, want luart: boom: ... sluice: boom", err)
			}
			var le *luart.Error
			if !errors.As(err, &le) || le.Script != "boom" {
				t.Fatalf("want *luart.Error for boom, got %T", err)
			}
			var re *rueidis.RedisError
			if !errors.As(err, &re) {
				t.Fatalf("want the server error to unwrap to *rueidis.RedisError, got %v", err)
			}
		})
	}
}

func TestDecoderRejectsMalformedReplies(t *testing.T) {
	ctx := context.Background()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			run := func(mode string) rueidis.RedisResult {
				return luart.Do(ctx, b.client, luart.Call{Script: shapes, Args: []string{mode}})
			}
			cases := []struct {
				mode, want string
				read       func(d *luart.Decoder)
			}{
				{"scalar", "want an array of 3 elements, got integer 7", func(d *luart.Decoder) {}},
				{"short", "want 3 elements, got 1", func(d *luart.Decoder) {}},
				{"types", `element 1 (a): want an integer, got string "x"`, func(d *luart.Decoder) { d.Int(0, "a"); d.Int(1, "b") }},
				{"types", `element 2 (b): want a string, got integer 2`, func(d *luart.Decoder) { d.String(0, "a"); d.String(1, "b") }},
				{"badbool", `element 1 (a): want a boolean (1, 0, true, false or nil), got integer 5`, func(d *luart.Decoder) { d.Bool(0, "a") }},
			}
			for _, c := range cases {
				n := 3
				if c.mode == "badbool" {
					n = 4
				}
				d := luart.NewDecoder(shapes, run(c.mode), n)
				c.read(d)
				err := d.Err()
				if !errors.Is(err, luart.ErrMalformedReply) || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "luart: shapes: ") {
					t.Errorf("%s: got %v, want ErrMalformedReply with %q", c.mode, err, c.want)
				}
			}
			// Lua true/false come back as 1/nil (RESP2) or booleans (RESP3); both decode.
			d := luart.NewDecoder(shapes, run("bools"), 4)
			got := []bool{d.Bool(0, "a"), d.Bool(1, "b"), d.Bool(2, "c"), d.Bool(3, "d")}
			if d.Err() != nil || fmt.Sprint(got) != "[true false true false]" {
				t.Fatalf("bools: got %v, %v", got, d.Err())
			}
			// Float reads integers and decimal strings.
			d = luart.NewDecoder(shapes, run("types"), 3)
			if f := d.Float(1, "b"); d.Err() != nil || f != 2 {
				t.Fatalf("Float of integer 2: got %v, %v", f, d.Err())
			}
		})
	}
}

// TestListDecoder: a reply whose last element is a list has at least the
// fixed elements, and the list is every element after them, each checked.
func TestListDecoder(t *testing.T) {
	ctx := context.Background()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			run := func(mode string) rueidis.RedisResult {
				return luart.Do(ctx, b.client, luart.Call{Script: shapes, Args: []string{mode}})
			}
			d := luart.NewListDecoder(shapes, run("list"), 1)
			if first, rest := d.Int(0, "n"), d.Ints(1, "rest"); d.Err() != nil || first != 1 || fmt.Sprint(rest) != "[2 3]" {
				t.Fatalf("{1, 2, 3} with 1 fixed element: %d, %v, %v", first, rest, d.Err())
			}
			d = luart.NewListDecoder(shapes, run("short"), 1)
			if rest := d.Ints(1, "rest"); d.Err() != nil || rest != nil {
				t.Fatalf("{1}: the list is %v, %v; want empty", rest, d.Err())
			}
			d = luart.NewListDecoder(shapes, run("short"), 2)
			if err := d.Err(); !errors.Is(err, luart.ErrMalformedReply) || !strings.Contains(err.Error(), "want at least 2 elements, got 1") {
				t.Fatalf("{1} with 2 fixed elements: %v", err)
			}
			d = luart.NewListDecoder(shapes, run("types"), 0)
			if rest := d.Ints(0, "rest"); rest != nil || !strings.Contains(fmt.Sprint(d.Err()), `element 1 (rest): want an integer, got string "x"`) {
				t.Fatalf("a list of {'x', 2, 'y'} as integers: %v, %v", rest, d.Err())
			}
			d = luart.NewListDecoder(shapes, run("scalar"), 0)
			if err := d.Err(); !errors.Is(err, luart.ErrMalformedReply) {
				t.Fatalf("a scalar reply: %v, want ErrMalformedReply", err)
			}
		})
	}
}

func TestExecBatchOfMixedCallsInOneRoundTrip(t *testing.T) {
	ctx := context.Background()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			c := &counting{CommandClient: b.client}
			calls := make([]luart.Call, 1000)
			for i := range calls {
				key := fmt.Sprintf("batch:{%d}", i%37)
				switch i % 3 {
				case 0:
					calls[i] = luart.Call{Script: incr, Keys: []string{key}, Args: []string{"1"}}
				case 1:
					calls[i] = luart.Call{Script: echo, Keys: []string{key}, Args: []string{fmt.Sprint(i)}}
				default:
					calls[i] = luart.Call{Script: getRO, Keys: []string{key + ":ro"}}
				}
			}
			check := func(res []rueidis.RedisResult) {
				t.Helper()
				if len(res) != len(calls) {
					t.Fatalf("got %d results for %d calls", len(res), len(calls))
				}
				for i, r := range res {
					switch i % 3 {
					case 0:
						d := luart.NewDecoder(incr, r, 2)
						if v := d.Int(0, "n"); d.Err() != nil || v < 1 {
							t.Fatalf("call %d: %v, %v", i, v, d.Err())
						}
					case 1:
						d := luart.NewDecoder(echo, r, 2)
						if v := d.String(0, "arg"); d.Err() != nil || v != fmt.Sprint(i) {
							t.Fatalf("call %d: %q, %v", i, v, d.Err())
						}
					default:
						d := luart.NewDecoder(getRO, r, 1)
						if v := d.String(0, "v"); d.Err() != nil || v != "none" {
							t.Fatalf("call %d: %q, %v", i, v, d.Err())
						}
					}
				}
			}

			// Scripts unknown to the server: one DoMulti of EVALSHA, one of EVAL for all.
			flushScripts(t, b.client)
			check(luart.Exec(ctx, c, calls...))
			if c.doMulti != 2 || strings.Count(c.sent(), "EVAL ") < 600 {
				t.Fatalf("cold batch: %d DoMulti calls, want 2 (EVALSHA batch, then EVAL batch)", c.doMulti)
			}
			// Scripts known: exactly one DoMulti of 1,000 EVALSHA(_RO).
			c.reset()
			check(luart.Exec(ctx, c, calls...))
			if c.doMulti != 1 || strings.Contains(c.sent(), "EVAL ") || len(strings.Fields(c.sent())) != 1000 {
				t.Fatalf("warm batch: %d DoMulti calls sending %d commands (EVAL present: %v), want 1 DoMulti of 1000 EVALSHA",
					c.doMulti, len(strings.Fields(c.sent())), strings.Contains(c.sent(), "EVAL "))
			}
			// A mix: after SCRIPT FLUSH, load one script only; only the others are resent.
			flushScripts(t, b.client)
			if err := luart.Load(ctx, b.client, echo); err != nil {
				t.Fatal(err)
			}
			c.reset()
			check(luart.Exec(ctx, c, calls...))
			if n := strings.Count(c.sent()+" ", "EVAL "); c.doMulti != 2 || n != 334 {
				t.Fatalf("partly loaded: %d DoMulti, %d EVAL resends; want 2 and 334 (the incr calls)", c.doMulti, n)
			}
		})
	}
}

func TestExecOnCluster(t *testing.T) {
	cl := redisserver.StartCluster(t, 3)
	c := newClient(t, rueidis.ClientOption{InitAddress: cl.Addrs(), DisableCache: true})
	ctx := context.Background()
	calls := make([]luart.Call, 300)
	for i := range calls {
		calls[i] = luart.Call{Script: incr, Keys: []string{fmt.Sprintf("cl:{user%d}", i%50)}, Args: []string{"1"}}
	}
	res := luart.Exec(ctx, c, calls...)
	for i, r := range res {
		d := luart.NewDecoder(incr, r, 2)
		if v := d.Int(0, "n"); d.Err() != nil || v != int64(i/50+1) {
			t.Fatalf("call %d: got %d, %v; want %d", i, v, d.Err(), i/50+1)
		}
	}
	// Each node loaded the script on first use; Do works too.
	if v := decodeInts(t, luart.Do(ctx, c, calls[0]), 2); v[0] != 7 {
		t.Fatalf("Do on cluster: got %v, want 7", v)
	}
}

func TestContextDeadlineIsReported(t *testing.T) {
	b := realBackend(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	time.Sleep(time.Millisecond)
	d := luart.NewDecoder(incr, luart.Do(ctx, b.client, luart.Call{Script: incr, Keys: []string{"k"}, Args: []string{"1"}}), 2)
	if err := d.Err(); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want context.DeadlineExceeded wrapped", err)
	}
}

func TestNilScript(t *testing.T) {
	b := miniBackend(t)
	if err := luart.Do(context.Background(), b.client, luart.Call{}).Error(); !errors.Is(err, luart.ErrNilScript) {
		t.Fatalf("Do: got %v, want ErrNilScript", err)
	}
	res := luart.Exec(context.Background(), b.client, luart.Call{}, luart.Call{Script: echo, Keys: []string{"k"}, Args: []string{"a"}})
	if !errors.Is(res[0].Error(), luart.ErrNilScript) || res[1].Error() != nil {
		t.Fatalf("Exec: got %v, %v", res[0].Error(), res[1].Error())
	}
}

func TestFormat(t *testing.T) {
	i, f, bo, s := int64(-42), 0.1, true, "x"
	got := []string{
		luart.FormatInt(9007199254740993), luart.FormatFloat(1e21), luart.FormatFloat(0.1), luart.FormatBool(false),
		luart.FormatOptInt(nil), luart.FormatOptInt(&i), luart.FormatOptFloat(&f), luart.FormatOptBool(&bo),
		luart.FormatOptString(&s), luart.FormatOptString(nil),
	}
	want := []string{"9007199254740993", "1000000000000000000000", "0.1", "0", "", "-42", "0.1", "1", "x", ""}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %q\nwant %q", got, want)
	}
}

// TestLoadOnEveryClusterNode: on a 3-master cluster Load puts the scripts
// on every primary, so calls on keys of every slot go out as EVALSHA only;
// a node that loses its scripts falls back to EVAL for its own calls only.
func TestLoadOnEveryClusterNode(t *testing.T) {
	cl := redisserver.StartCluster(t, 3)
	c := newClient(t, rueidis.ClientOption{InitAddress: cl.Addrs(), DisableCache: true})
	ctx := context.Background()
	if err := luart.Load(ctx, c, incr, getRO); err != nil {
		t.Fatalf("Load: %v", err)
	}
	nodes := c.Nodes()
	if len(nodes) != 3 {
		t.Fatalf("the client knows %d nodes, want the 3 primaries", len(nodes))
	}
	for addr, n := range nodes {
		got, err := n.Do(ctx, n.B().ScriptExists().Sha1(incr.SHA1, getRO.SHA1).Build()).AsIntSlice()
		if err != nil || len(got) != 2 || got[0] != 1 || got[1] != 1 {
			t.Errorf("SCRIPT EXISTS on %s = %v, %v; want both scripts loaded", addr, got, err)
		}
	}

	// A mismatch is reported for every node, each named.
	bad := *incr
	bad.SHA1 = strings.Repeat("0", 40)
	err := luart.Load(ctx, c, &bad)
	for addr := range nodes {
		if err == nil || !strings.Contains(err.Error(), "luart: incr: on "+addr+": server SHA1 ") {
			t.Errorf("Load with a wrong SHA1: %v; want a mismatch on %s", err, addr)
		}
	}

	// Keys spread over all three nodes: one EVALSHA each, no NOSCRIPT.
	calls := make([]luart.Call, 30)
	for i := range calls {
		calls[i] = luart.Call{Script: incr, Keys: []string{fmt.Sprintf("load:{user%d}", i)}, Args: []string{"1"}}
	}
	counted := &counting{CommandClient: c}
	for i, r := range luart.Exec(ctx, counted, calls...) {
		if v := decodeInts(t, r, 2); v[0] != 1 {
			t.Fatalf("call %d: got %v, want 1", i, v)
		}
	}
	if s := counted.sent(); strings.Contains(s, "EVAL ") || strings.HasSuffix(s, "EVAL") {
		t.Fatalf("after Load the calls sent %q, want EVALSHA only", s)
	}

	// One node forgets its scripts: only the calls it serves are sent again.
	first := cl.Nodes[0]
	if _, err := first.Command("SCRIPT", "FLUSH"); err != nil {
		t.Fatal(err)
	}
	onFirst := 0
	for _, call := range calls {
		if servedBy(t, first, call.Keys[0]) {
			onFirst++
		}
	}
	counted.reset()
	for i, r := range luart.Exec(ctx, counted, calls...) {
		if v := decodeInts(t, r, 2); v[0] != 2 {
			t.Fatalf("call %d after SCRIPT FLUSH on one node: got %v, want 2", i, v)
		}
	}
	if got := strings.Count(counted.sent(), "EVALSHA"); got != len(calls) {
		t.Errorf("sent %d EVALSHA, want %d", got, len(calls))
	}
	if got := len(strings.Fields(counted.sent())) - len(calls); got != onFirst || onFirst == 0 {
		t.Errorf("sent %d EVAL after the flush, want one per call on the flushed node (%d)", got, onFirst)
	}
}

// servedBy reports whether the cluster node holds key's slot: another node
// answers a GET with a MOVED redirection.
func servedBy(t *testing.T, node *redisserver.Server, key string) bool {
	t.Helper()
	_, err := node.Command("GET", key)
	if err != nil && strings.HasPrefix(err.Error(), "MOVED ") {
		return false
	}
	if err != nil {
		t.Fatalf("GET %s on %s: %v", key, node.Addr, err)
	}
	return true
}

// FormatInt gives strconv's decimal form for every value, from the cache
// or not, also while goroutines fill colliding slots, and allocates
// nothing for a value it has formatted before.
func TestFormatIntCache(t *testing.T) {
	vals := []int64{math.MinInt64, -1, 0, 7, 99, 100, 101, 1000, 1_000_000, 3_600_000_000, 1<<50 - 1, 1 << 50, 1_764_590_000_123_456, math.MaxInt64}
	for i := range int64(5000) {
		vals = append(vals, 100+i*7919)
	}
	var wg sync.WaitGroup
	errs := make(chan string, 4)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 3 {
				for i := range vals {
					v := vals[(i+g*997)%len(vals)]
					if got, want := luart.FormatInt(v), strconv.FormatInt(v, 10); got != want {
						select {
						case errs <- fmt.Sprintf("FormatInt(%d) = %q, want %q", v, got, want):
						default:
						}
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	luart.FormatInt(3_600_000_000)
	if raceEnabled {
		return // the race detector allocates on its own
	}
	if n := allocs.PerRun(5, 100, func() { luart.FormatInt(3_600_000_000) }); n != 0 {
		t.Errorf("FormatInt of a cached value allocates %.1f times, want 0", n)
	}
}

// TestFromValue: a reply another client decoded (go-redis' Go values)
// reads as a rueidis reply of the same shape does, and is refused with the
// same messages.
func TestFromValue(t *testing.T) {
	boom := errors.New("ERR boom")
	d := luart.NewReplyDecoder(shapes, luart.FromValue([]any{int64(7), "x", true, nil, 2.5, "1.5", false}, nil), 7)
	got := strings.TrimSpace(fmt.Sprintln(d.Int(0, "a"), d.String(1, "b"), d.Bool(2, "c"), d.Bool(3, "d"), d.Float(4, "e"), d.Float(5, "f"), d.Bool(6, "g"), d.Float(0, "a")))
	if d.Err() != nil || got != "7 x true false 2.5 1.5 false 7" {
		t.Fatalf("got %s, %v", got, d.Err())
	}
	d = luart.NewListReplyDecoder(shapes, luart.FromValue([]any{int64(1), int64(2), int64(3)}, nil), 1)
	if first, rest := d.Int(0, "n"), d.Ints(1, "rest"); d.Err() != nil || first != 1 || fmt.Sprint(rest) != "[2 3]" {
		t.Fatalf("{1, 2, 3} with 1 fixed element: %d, %v, %v", first, rest, d.Err())
	}
	d = luart.NewListReplyDecoder(shapes, luart.FromValue([]any{}, nil), 0)
	if rest := d.Ints(0, "rest"); d.Err() != nil || rest != nil {
		t.Fatalf("an empty list: %v, %v", rest, d.Err())
	}
	for _, c := range []struct {
		v    any
		n    int
		read func(d *luart.Decoder)
		want string
	}{
		{int64(7), 3, func(*luart.Decoder) {}, "want an array of 3 elements, got integer 7"},
		{nil, 1, func(*luart.Decoder) {}, "want an array of 1 elements, got nil"},
		{[]any{int64(1)}, 3, func(*luart.Decoder) {}, "want 3 elements, got 1"},
		{[]any{"x", int64(2)}, 2, func(d *luart.Decoder) { d.Int(0, "a") }, `element 1 (a): want an integer, got string "x"`},
		{[]any{"x", int64(2)}, 2, func(d *luart.Decoder) { d.String(0, "a"); d.String(1, "b") }, "element 2 (b): want a string, got integer 2"},
		{[]any{int64(5)}, 1, func(d *luart.Decoder) { d.Bool(0, "a") }, "element 1 (a): want a boolean (1, 0, true, false or nil), got integer 5"},
		{[]any{"1e"}, 1, func(d *luart.Decoder) { d.Float(0, "a") }, `element 1 (a): want a number, got string "1e"`},
		{[]any{boom}, 1, func(d *luart.Decoder) { d.Int(0, "a") }, `element 1 (a): want an integer, got error reply "ERR boom"`},
		{[]any{map[string]any{}}, 1, func(d *luart.Decoder) { d.Int(0, "a") }, "got reply of another type (map[string]interface {})"},
	} {
		d := luart.NewReplyDecoder(shapes, luart.FromValue(c.v, nil), c.n)
		c.read(d)
		if err := d.Err(); !errors.Is(err, luart.ErrMalformedReply) || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "luart: shapes: ") {
			t.Errorf("%#v: got %v, want ErrMalformedReply with %q", c.v, err, c.want)
		}
	}
	r := luart.FromValue(nil, boom)
	if d := luart.NewReplyDecoder(shapes, r, 1); !errors.Is(d.Err(), boom) || d.Int(0, "a") != 0 {
		t.Fatalf("an error reply: %v", d.Err())
	}
	if r.IsNoScript() || !luart.FromValue(nil, errors.New("NOSCRIPT No matching script")).IsNoScript() {
		t.Fatal("IsNoScript of a reply FromValue")
	}
}
