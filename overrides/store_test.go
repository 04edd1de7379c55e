package overrides

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice"
)

// testStart is the virtual time every miniredis test starts at.
var testStart = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// env is a Store on miniredis with a clock the test moves (the Store's and
// miniredis'), and the lines the Store logged.
type env struct {
	t      testing.TB
	mr     *miniredis.Miniredis
	client rueidis.Client
	store  *Store
	now    time.Time
	logs   *logBuffer
	sent   *countingClient // the Store's client
}

// countingClient counts the commands the Store sends, and only those:
// miniredis's own count also holds what the client sends on its own (the
// handshake of a connection it opens, a keep-alive PING), which a loaded
// machine's timing decides.
type countingClient struct {
	rueidis.Client
	n atomic.Int64
}

func (c *countingClient) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	c.n.Add(1)
	return c.Client.Do(ctx, cmd)
}

func (c *countingClient) DoCache(ctx context.Context, cmd rueidis.Cacheable, ttl time.Duration) rueidis.RedisResult {
	c.n.Add(1)
	return c.Client.DoCache(ctx, cmd, ttl)
}

func (c *countingClient) DoMulti(ctx context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
	c.n.Add(int64(len(cmds)))
	return c.Client.DoMulti(ctx, cmds...)
}

func (c *countingClient) DoMultiCache(ctx context.Context, cmds ...rueidis.CacheableTTL) []rueidis.RedisResult {
	c.n.Add(int64(len(cmds)))
	return c.Client.DoMultiCache(ctx, cmds...)
}

// commands is how many commands the Store has sent.
func (e *env) commands() int { return int(e.sent.n.Load()) }

// logBuffer collects slog lines as JSON, safely for concurrent writers.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// lines returns the logged lines holding every one of subs.
func (l *logBuffer) lines(subs ...string) []string {
	var out []string
	for _, line := range strings.Split(l.String(), "\n") {
		ok := line != ""
		for _, s := range subs {
			ok = ok && strings.Contains(line, s)
		}
		if ok {
			out = append(out, line)
		}
	}
	return out
}

func newEnv(t testing.TB, opts Options) *env {
	t.Helper()
	mr := miniredis.RunT(t)
	mr.SetTime(testStart)
	mr.ClockTTL(true)
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{mr.Addr()},
		DisableCache: true, ForceSingleClient: true, DisableRetry: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	e := &env{t: t, mr: mr, client: client, now: testStart, logs: &logBuffer{}, sent: &countingClient{Client: client}}
	opts.Clock = func() time.Time { return e.now }
	if opts.Timeout == 0 {
		opts.Timeout = time.Minute // no lookup fails for a slow machine
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewJSONHandler(e.logs, nil))
	}
	if e.store, err = New(e.sent, opts); err != nil {
		t.Fatal(err)
	}
	return e
}

// advance moves the clock of the Store and of miniredis.
func (e *env) advance(d time.Duration) {
	e.now = e.now.Add(d)
	e.mr.SetTime(e.now)
}

func (e *env) set(o Override) {
	e.t.Helper()
	if err := e.store.Set(context.Background(), o); err != nil {
		e.t.Fatal(err)
	}
}

func TestSetGetListRemove(t *testing.T) {
	e := newEnv(t, Options{})
	ctx := context.Background()
	if e.store.ClientCache() {
		t.Fatal("a client with DisableCache on miniredis: want the local cache")
	}
	until := testStart.Add(time.Hour)
	e.set(Override{Policy: "per-key", Identity: "key:b", Kind: Limit, Rate: 1000, Period: time.Minute, Burst: 50, Until: until, Reason: "customer upgrade"})
	e.set(Override{Policy: "per-key", Identity: "key:a", Kind: Exempt, Reason: "internal"})
	e.set(Override{Policy: "per-ip", Identity: "ip:203.0.113.7", Kind: Block, Until: until, Reason: "abuse"})

	got, ok, err := e.store.Get(ctx, "per-key", "key:b")
	want := Override{Policy: "per-key", Identity: "key:b", Kind: Limit, Rate: 1000, Period: time.Minute, Burst: 50,
		Until: until, Reason: "customer upgrade", Set: testStart}
	if err != nil || !ok || !sameOverride(got, want) {
		t.Fatalf("Get = %+v, %v, %v; want %+v", got, ok, err, want)
	}
	if _, ok, err := e.store.Get(ctx, "per-key", "key:nobody"); ok || err != nil {
		t.Fatalf("Get of an identity without override = %v, %v", ok, err)
	}

	list, err := e.store.List(ctx, "per-key")
	if err != nil {
		t.Fatal(err)
	}
	if ids := identities(list); ids != "per-key/key:a per-key/key:b" {
		t.Fatalf("List(per-key) = %s", ids)
	}
	all, err := e.store.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if ids := identities(all); ids != "per-ip/ip:203.0.113.7 per-key/key:a per-key/key:b" {
		t.Fatalf("List(\"\") = %s", ids)
	}

	// Replacing keeps one entry.
	e.set(Override{Policy: "per-key", Identity: "key:b", Kind: Block, Reason: "chargeback"})
	if got, _, _ := e.store.Get(ctx, "per-key", "key:b"); got.Kind != Block || got.Reason != "chargeback" || !got.Until.IsZero() {
		t.Fatalf("after replacing: %+v", got)
	}

	removed, err := e.store.Remove(ctx, "per-key", "key:b")
	if err != nil || !removed {
		t.Fatalf("Remove = %v, %v; want true", removed, err)
	}
	if removed, err := e.store.Remove(ctx, "per-key", "key:b"); err != nil || removed {
		t.Fatalf("second Remove = %v, %v; want false", removed, err)
	}
	if _, ok, _ := e.store.Get(ctx, "per-key", "key:b"); ok {
		t.Fatal("Get after Remove found the override")
	}
	// Removing the last override of a policy deletes its hash.
	if _, err := e.store.Remove(ctx, "per-key", "key:a"); err != nil {
		t.Fatal(err)
	}
	if e.mr.Exists("sluice:overrides:{per-key}") || e.mr.Exists("sluice:overrides:{per-key}:version") {
		t.Fatal("the keys of a policy without overrides are still there")
	}
	if all, _ := e.store.List(ctx, ""); identities(all) != "per-ip/ip:203.0.113.7" {
		t.Fatalf("List(\"\") after removals = %s", identities(all))
	}
}

// sameOverride compares overrides, their times with Equal.
func sameOverride(a, b Override) bool {
	return a.Policy == b.Policy && a.Identity == b.Identity && a.Kind == b.Kind && a.Rate == b.Rate &&
		a.Period == b.Period && a.Burst == b.Burst && a.Until.Equal(b.Until) && a.Reason == b.Reason && a.Set.Equal(b.Set)
}

func identities(os []Override) string {
	var b []string
	for _, o := range os {
		b = append(b, o.Policy+"/"+o.Identity)
	}
	return strings.Join(b, " ")
}

// TestExpiryAtUntil: an override applies at every instant before its
// Until and at none from it on, in Lookup, Get and List; Set and List then
// sweep it from Redis, and the hash's own TTL is its latest Until.
func TestExpiryAtUntil(t *testing.T) {
	e := newEnv(t, Options{LocalCache: time.Nanosecond}) // every Lookup looks at Redis
	ctx := context.Background()
	until := testStart.Add(10 * time.Second)
	later := testStart.Add(time.Hour)
	e.set(Override{Policy: "p", Identity: "ip:1", Kind: Block, Until: until})
	e.set(Override{Policy: "p", Identity: "ip:2", Kind: Block, Until: later})
	if ttl := e.mr.TTL("sluice:overrides:{p}"); ttl != time.Hour {
		t.Fatalf("hash TTL %v, want the latest Until, 1h", ttl)
	}
	if ttl := e.mr.TTL("sluice:overrides"); ttl != time.Hour {
		t.Fatalf("index TTL %v, want 1h", ttl)
	}

	e.advance(10*time.Second - time.Microsecond)
	if _, ok := e.store.Lookup(ctx, "p", "ip:1"); !ok {
		t.Fatal("Lookup 1µs before Until: no override")
	}
	if _, ok, _ := e.store.Get(ctx, "p", "ip:1"); !ok {
		t.Fatal("Get 1µs before Until: no override")
	}
	e.advance(time.Microsecond)
	if o, ok := e.store.Lookup(ctx, "p", "ip:1"); ok {
		t.Fatalf("Lookup at Until: %+v", o)
	}
	if _, ok, _ := e.store.Get(ctx, "p", "ip:1"); ok {
		t.Fatal("Get at Until found the override")
	}
	if list, _ := e.store.List(ctx, "p"); identities(list) != "p/ip:2" {
		t.Fatalf("List at Until = %s", identities(list))
	}
	// List swept the expired entry.
	if keys, _ := e.mr.HKeys("sluice:overrides:{p}"); strings.Contains(strings.Join(keys, ","), "ip:1") {
		t.Fatalf("expired entry not swept: fields %q", keys)
	}

	// A Set sweeps too, and the hash's TTL follows its latest Until.
	e.set(Override{Policy: "p", Identity: "ip:3", Kind: Exempt, Until: e.now.Add(2 * time.Hour)})
	if ttl := e.mr.TTL("sluice:overrides:{p}"); ttl != 2*time.Hour {
		t.Fatalf("hash TTL %v, want 2h", ttl)
	}
	if ttl := e.mr.TTL("sluice:overrides:{p}:version"); ttl != 2*time.Hour {
		t.Fatalf("version TTL %v, want the hash's, 2h", ttl)
	}
	// The index never shortens.
	if ttl := e.mr.TTL("sluice:overrides"); ttl != 2*time.Hour {
		t.Fatalf("index TTL %v, want 2h", ttl)
	}
	// One that never expires keeps the hash and the index.
	e.set(Override{Policy: "p", Identity: "ip:4", Kind: Exempt})
	if ttl := e.mr.TTL("sluice:overrides:{p}"); ttl != 0 {
		t.Fatalf("hash TTL %v with an override that never ends, want none", ttl)
	}
	if ttl := e.mr.TTL("sluice:overrides:{p}:version"); ttl != 0 {
		t.Fatalf("version TTL %v with an override that never ends, want none", ttl)
	}
	if ttl := e.mr.TTL("sluice:overrides"); ttl != 0 {
		t.Fatalf("index TTL %v, want none", ttl)
	}
	if _, err := e.store.Remove(ctx, "p", "ip:4"); err != nil {
		t.Fatal(err)
	}
	if ttl := e.mr.TTL("sluice:overrides:{p}"); ttl != 2*time.Hour {
		t.Fatalf("hash TTL after removing the endless one: %v, want the latest Until", ttl)
	}

	// When every override has expired, Redis drops the hash itself.
	e.advance(3 * time.Hour)
	if e.mr.Exists("sluice:overrides:{p}") || e.mr.Exists("sluice:overrides:{p}:version") {
		t.Fatal("the policy's keys outlived its latest Until")
	}
}

// TestUntilRoundedUp: Until is kept to the microsecond, rounded up, so an
// override never ends before the instant it was given.
func TestUntilRoundedUp(t *testing.T) {
	e := newEnv(t, Options{LocalCache: time.Nanosecond})
	until := testStart.Add(time.Second + 1) // 1 ns past a whole µs
	e.set(Override{Policy: "p", Identity: "ip:1", Kind: Block, Until: until})
	e.advance(time.Second)
	if _, ok := e.store.Lookup(context.Background(), "p", "ip:1"); !ok {
		t.Fatal("ended before its Until")
	}
	e.advance(time.Microsecond)
	if _, ok := e.store.Lookup(context.Background(), "p", "ip:1"); ok {
		t.Fatal("still applies 1µs (rounded up) after Until")
	}
}

// TestKeys: a policy's two keys share a cluster slot whatever its name,
// and a custom prefix starts them.
func TestKeys(t *testing.T) {
	e := newEnv(t, Options{Prefix: "api"})
	for _, tc := range []struct{ policy, hash string }{
		{"per-ip", "api:overrides:{per-ip}"},
		{"}x{", "api:overrides:{#" + sha256hex("}x{") + "}"},
		{"#1", "api:overrides:{#" + sha256hex("#1") + "}"},
	} {
		hash, version := e.store.keys(tc.policy)
		if hash != tc.hash || version != tc.hash+":version" {
			t.Errorf("keys(%q) = %q, %q; want %q and its :version", tc.policy, hash, version, tc.hash)
		}
		e.set(Override{Policy: tc.policy, Identity: "ip:1", Kind: Exempt})
		if !e.mr.Exists(hash) || !e.mr.Exists(version) {
			t.Errorf("policy %q: keys %q and %q not written", tc.policy, hash, version)
		}
		if got, _ := e.store.List(context.Background(), tc.policy); identities(got) != tc.policy+"/ip:1" {
			t.Errorf("List(%q) = %s", tc.policy, identities(got))
		}
	}
	if members, _ := e.mr.Members("api:overrides"); len(members) != 3 {
		t.Errorf("index %q, want the 3 policies", members)
	}
}

func sha256hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func TestBounds(t *testing.T) {
	e := newEnv(t, Options{MaxPerPolicy: 3})
	ctx := context.Background()
	long := strings.Repeat("x", 257)
	for _, o := range []Override{
		{Policy: "p", Identity: long, Kind: Exempt},
		{Policy: "p", Identity: "ip:1", Kind: Exempt, Reason: long},
	} {
		if err := e.store.Set(ctx, o); !errors.Is(err, ErrInvalid) {
			t.Fatalf("Set with a 257-byte field: %v, want ErrInvalid", err)
		}
	}
	e.set(Override{Policy: "p", Identity: strings.Repeat("i", 256), Kind: Exempt, Reason: strings.Repeat("r", 256)})
	e.set(Override{Policy: "p", Identity: "ip:2", Kind: Exempt, Until: testStart.Add(time.Minute)})
	e.set(Override{Policy: "p", Identity: "ip:3", Kind: Exempt})
	err := e.store.Set(ctx, Override{Policy: "p", Identity: "ip:4", Kind: Exempt})
	if !errors.Is(err, ErrFull) || !strings.Contains(err.Error(), "MaxPerPolicy") {
		t.Fatalf("Set beyond MaxPerPolicy: %v, want ErrFull naming MaxPerPolicy", err)
	}
	if _, ok, _ := e.store.Get(ctx, "p", "ip:4"); ok {
		t.Fatal("the refused override was stored")
	}
	// Replacing one is not one more; another policy has its own bound.
	e.set(Override{Policy: "p", Identity: "ip:3", Kind: Block})
	e.set(Override{Policy: "q", Identity: "ip:4", Kind: Block})
	// An expired one is swept and leaves room.
	e.advance(time.Minute)
	e.set(Override{Policy: "p", Identity: "ip:4", Kind: Exempt})
}

func TestBadInput(t *testing.T) {
	e := newEnv(t, Options{})
	ctx := context.Background()
	commands := e.commands()
	for _, tc := range []struct {
		o    Override
		want string
	}{
		{Override{Identity: "ip:1", Kind: Exempt}, "policy name"},
		{Override{Policy: "p\n", Identity: "ip:1", Kind: Exempt}, "policy name"},
		{Override{Policy: strings.Repeat("p", 65), Identity: "ip:1", Kind: Exempt}, "policy name"},
		{Override{Policy: "p", Kind: Exempt}, "identity"},
		{Override{Policy: "p", Identity: "ip:1"}, "Kind 0"},
		{Override{Policy: "p", Identity: "ip:1", Kind: 9}, "Kind 9"},
		{Override{Policy: "p", Identity: "ip:1", Kind: Limit}, "Rate 0"},
		{Override{Policy: "p", Identity: "ip:1", Kind: Limit, Rate: 1 << 41}, "Rate"},
		{Override{Policy: "p", Identity: "ip:1", Kind: Limit, Rate: 1, Period: -time.Second}, "Period"},
		{Override{Policy: "p", Identity: "ip:1", Kind: Limit, Rate: 1, Period: time.Nanosecond}, "Period"},
		{Override{Policy: "p", Identity: "ip:1", Kind: Limit, Rate: 1, Burst: -1}, "Burst"},
		{Override{Policy: "p", Identity: "ip:1", Kind: Exempt, Rate: 5}, "takes no Rate"},
		{Override{Policy: "p", Identity: "ip:1", Kind: Block, Until: testStart}, "not after now"},
		{Override{Policy: "p", Identity: "ip:1", Kind: Block, Reason: "a\nb"}, "control characters"},
		{Override{Policy: "p", Identity: "ip:1", Kind: Block, Reason: "\xff"}, "UTF-8"},
	} {
		err := e.store.Set(ctx, tc.o)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Set(%+v) = %v; want ErrInvalid saying %q", tc.o, err, tc.want)
		}
	}
	if _, _, err := e.store.Get(ctx, "", "ip:1"); !errors.Is(err, ErrInvalid) {
		t.Errorf("Get with no policy: %v", err)
	}
	if _, err := e.store.Remove(ctx, "p", ""); !errors.Is(err, ErrInvalid) {
		t.Errorf("Remove with no identity: %v", err)
	}
	if n := e.commands() - commands; n != 0 {
		t.Errorf("refused input sent %d commands to Redis", n)
	}

	client := e.client
	for _, tc := range []struct {
		opts Options
		want string
	}{
		{Options{Prefix: "a b"}, "Prefix"},
		{Options{Prefix: "{x}"}, "Prefix"},
		{Options{MaxPerPolicy: -1}, "MaxPerPolicy"},
		{Options{LocalCache: -1}, "LocalCache"},
		{Options{Timeout: -1}, "Timeout"},
		{Options{Cache: 7}, "Cache"},
	} {
		if _, err := New(client, tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v; want an error naming %s", tc.opts, err, tc.want)
		}
	}
	if _, err := New(nil, Options{}); err == nil {
		t.Error("New(nil) succeeded")
	}
	if _, err := ParseKind("blocked"); !errors.Is(err, ErrInvalid) {
		t.Errorf("ParseKind(blocked) = %v", err)
	}
	for _, k := range []Kind{Limit, Exempt, Block} {
		if got, err := ParseKind(k.String()); got != k || err != nil {
			t.Errorf("ParseKind(%q) = %v, %v", k.String(), got, err)
		}
	}
}

// TestLogging: every Set and Remove is logged with policy, identity, kind,
// until and reason.
func TestLogging(t *testing.T) {
	e := newEnv(t, Options{})
	ctx := context.Background()
	e.set(Override{Policy: "per-ip", Identity: "ip:203.0.113.7", Kind: Block, Until: testStart.Add(time.Hour), Reason: "credential stuffing"})
	e.set(Override{Policy: "per-key", Identity: "key:0f", Kind: Limit, Rate: 500, Reason: "trial"})
	if _, err := e.store.Remove(ctx, "per-ip", "ip:203.0.113.7"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Remove(ctx, "per-ip", "ip:203.0.113.7"); err != nil { // nothing removed: not logged
		t.Fatal(err)
	}
	for _, want := range [][]string{
		{`"msg":"overrides: set"`, `"policy":"per-ip"`, `"identity":"ip:203.0.113.7"`, `"kind":"block"`, `"until":"2026-03-01T13:00:00Z"`, `"reason":"credential stuffing"`},
		{`"msg":"overrides: set"`, `"policy":"per-key"`, `"kind":"limit"`, `"until":"never"`, `"reason":"trial"`, `"rate":500`},
		{`"msg":"overrides: removed"`, `"policy":"per-ip"`, `"identity":"ip:203.0.113.7"`, `"kind":"block"`, `"until":"2026-03-01T13:00:00Z"`, `"reason":"credential stuffing"`},
	} {
		if got := e.logs.lines(want...); len(got) != 1 {
			t.Errorf("want one line with %q, got %d in:\n%s", want, len(got), e.logs)
		}
	}
	if n := len(e.logs.lines("overrides: removed")); n != 1 {
		t.Errorf("%d removal lines, want 1 (a Remove that found nothing is not logged)", n)
	}
}

// TestLocalCache: without the client's cache, a change reaches Lookup at
// most LocalCache late, and Lookup asks Redis at most once per LocalCache
// and policy.
func TestLocalCache(t *testing.T) {
	e := newEnv(t, Options{LocalCache: time.Second})
	ctx := context.Background()
	if _, ok := e.store.Lookup(ctx, "p", "ip:1"); ok {
		t.Fatal("override before any was set")
	}
	e.set(Override{Policy: "p", Identity: "ip:1", Kind: Block})
	e.advance(time.Second - time.Microsecond)
	before := e.commands()
	for range 100 {
		if _, ok := e.store.Lookup(ctx, "p", "ip:1"); ok {
			t.Fatal("the copy changed before LocalCache had passed")
		}
	}
	if n := e.commands() - before; n != 0 {
		t.Fatalf("100 lookups within LocalCache sent %d commands", n)
	}
	e.advance(time.Microsecond)
	o, ok := e.store.Lookup(ctx, "p", "ip:1")
	if !ok || o.Kind != Block {
		t.Fatalf("LocalCache after the change: %+v, %v", o, ok)
	}
	// That refresh asked for the version and read the changed policy:
	// two commands; the next ones, none, and one version within each
	// LocalCache after.
	if n := e.commands() - before; n != 2 {
		t.Fatalf("the refresh sent %d commands, want 2 (GET of the version, HGETALL)", n)
	}
	before = e.commands()
	for range 3 {
		e.advance(time.Second)
		for range 10 {
			e.store.Lookup(ctx, "p", "ip:1")
		}
	}
	if n := e.commands() - before; n != 3 {
		t.Fatalf("3 × LocalCache of unchanged overrides sent %d commands, want 3", n)
	}
	// Sync drops the copy: the next Lookup sees a change at once.
	if _, err := e.store.Remove(ctx, "p", "ip:1"); err != nil {
		t.Fatal(err)
	}
	if err := e.store.Sync(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.store.Lookup(ctx, "p", "ip:1"); ok {
		t.Fatal("the removal did not reach Lookup after Sync")
	}
}

// TestLookupFailure: when Redis fails, Lookup answers "no override" without
// failing, logs once, and does not ask again for a second.
func TestLookupFailure(t *testing.T) {
	e := newEnv(t, Options{LocalCache: time.Nanosecond, Timeout: time.Minute})
	ctx := context.Background()
	e.set(Override{Policy: "p", Identity: "ip:1", Kind: Block})
	if _, ok := e.store.Lookup(ctx, "p", "ip:1"); !ok {
		t.Fatal("no override")
	}
	e.mr.Close()
	e.advance(time.Millisecond)
	for range 50 {
		if _, ok := e.store.Lookup(ctx, "p", "ip:1"); ok {
			t.Fatal("an override from a Redis that is gone")
		}
	}
	if n := len(e.logs.lines("overrides: lookup failed")); n != 1 {
		t.Fatalf("%d failure lines, want 1:\n%s", n, e.logs)
	}
	if err := e.mr.Restart(); err != nil {
		t.Fatal(err)
	}
	e.mr.SetTime(e.now)
	// Within the second after the failure: no asking.
	before := e.commands()
	e.advance(failBackoff - time.Microsecond)
	if _, ok := e.store.Lookup(ctx, "p", "ip:1"); ok || e.commands() != before {
		t.Fatalf("within the back-off: override %v, %d commands sent", ok, e.commands()-before)
	}
	// Once Redis is back, a lookup after the back-off obeys again (the
	// first may still meet the broken connection, and wait another second).
	for try := 0; ; try++ {
		e.advance(failBackoff)
		if _, ok := e.store.Lookup(ctx, "p", "ip:1"); ok {
			break
		}
		if try == 2 {
			t.Fatalf("no override once Redis is back and the back-off has passed:\n%s", e.logs)
		}
	}
}

func TestEncodeDecode(t *testing.T) {
	for _, o := range []Override{
		{Policy: "p", Identity: "ip:1", Kind: Limit, Rate: 7, Period: 90 * time.Second, Burst: 3, Until: testStart.Add(time.Hour), Reason: "a reason with spaces", Set: testStart},
		{Policy: "p", Identity: "ip:1", Kind: Exempt, Set: testStart},
		{Policy: "p", Identity: "ip:1", Kind: Block, Until: testStart.Add(time.Microsecond), Set: testStart},
	} {
		got, err := decode(o.Policy, o.Identity, encode(&o))
		if err != nil || !sameOverride(got, o) {
			t.Errorf("decode(encode(%+v)) = %+v, %v", o, got, err)
		}
	}
	for _, v := range []string{"", "1", "1 2 L 3 4 5", "1 2 X 3 4 5 r", "1 2  3 4 5 r", "1 2 LL 3 4 5 r", "-1 2 L 3 4 5 r",
		"1 2 L 99999999999999999999 4 5 r", "1 2 L 3 9223372036854775807 5 r"} {
		if o, err := decode("p", "i", v); err == nil {
			t.Errorf("decode(%q) = %+v, want an error", v, o)
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add("1767225600000000 1767139200000000 L 1000 60000000 100 reason")
	f.Add("0 0 E 0 0 0 ")
	f.Fuzz(func(t *testing.T, v string) {
		o, err := decode("p", "i", v)
		if err != nil {
			return
		}
		// What decodes re-encodes to a value that decodes the same.
		o2, err := decode("p", "i", encode(&o))
		if err != nil || !sameOverride(o, o2) {
			t.Fatalf("%q: %+v, re-encoded %+v, %v", v, o, o2, err)
		}
	})
}

func TestApply(t *testing.T) {
	gcra := sluice.Must(sluice.GCRA(10, time.Minute, 5)).Named("plan")
	fixed := sluice.Must(sluice.FixedWindow(10, time.Minute)).Named("plan")
	for _, tc := range []struct {
		o    Override
		l    sluice.Limit
		want sluice.Limit
		err  string
	}{
		{Override{Kind: Limit, Rate: 100}, gcra, sluice.Limit{Algorithm: sluice.AlgGCRA, Rate: 100, Period: time.Minute, Burst: 5, Name: "plan"}, ""},
		{Override{Kind: Limit, Rate: 100, Period: time.Hour, Burst: 50}, gcra, sluice.Limit{Algorithm: sluice.AlgGCRA, Rate: 100, Period: time.Hour, Burst: 50, Name: "plan"}, ""},
		{Override{Kind: Limit, Rate: 3}, fixed, sluice.Limit{Algorithm: sluice.AlgFixedWindow, Rate: 3, Period: time.Minute, Name: "plan"}, ""},
		{Override{Kind: Limit, Rate: 3, Period: time.Minute}, fixed, sluice.Limit{Algorithm: sluice.AlgFixedWindow, Rate: 3, Period: time.Minute, Name: "plan"}, ""},
		// A window's period may change too: its state keeps the period it was counted under.
		{Override{Kind: Limit, Rate: 3, Period: time.Hour}, fixed, sluice.Limit{Algorithm: sluice.AlgFixedWindow, Rate: 3, Period: time.Hour, Name: "plan"}, ""},
		{Override{Kind: Limit, Rate: 1 << 40, Burst: 1 << 40}, gcra, sluice.Limit{}, "burst"},
		{Override{Kind: Exempt}, gcra, sluice.Limit{}, "has no limit"},
	} {
		got, err := tc.o.Apply(tc.l)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("Apply(%+v) to %s = %v; want an error saying %q", tc.o, tc.l.Name, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Apply(%+v) to %+v = %+v, %v; want %+v", tc.o, tc.l, got, err, tc.want)
		}
	}
}

// TestLookupConcurrent: lookups from several goroutines while overrides
// change see either the old or the new overrides, never anything else
// (and, under -race, share the Store's state safely).
func TestLookupConcurrent(t *testing.T) {
	e := newEnv(t, Options{})
	ctx := context.Background()
	e.set(Override{Policy: "p", Identity: "ip:1", Kind: Block})
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 300 {
				if o, ok := e.store.Lookup(ctx, "p", "ip:1"); !ok || o.Kind != Block && o.Kind != Exempt {
					t.Errorf("Lookup = %+v, %v", o, ok)
					return
				}
				if err := e.store.Sync(ctx, "p"); err != nil { // the next Lookup refreshes the copy
					t.Error(err)
					return
				}
			}
		}()
	}
	for i := range 20 {
		kind := Block
		if i%2 == 1 {
			kind = Exempt
		}
		e.set(Override{Policy: "p", Identity: "ip:1", Kind: kind})
	}
	wg.Wait()
	if err := e.store.Sync(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	if o, ok := e.store.Lookup(ctx, "p", "ip:1"); !ok || o.Kind != Exempt {
		t.Fatalf("after the changes: %+v, %v; want the last, exempt", o, ok)
	}
}
