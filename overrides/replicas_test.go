package overrides_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adapters/httplimit"
	"github.com/sluice-go/sluice/adapters/ratepolicy"
	"github.com/sluice-go/sluice/internal/redisserver"
	"github.com/sluice-go/sluice/overrides"
)

// replica is one process of a fleet: its own Limiter and Store, each on
// its own rueidis client (the Store's with rueidis' cache on), behind
// one httplimit middleware.
type replica struct {
	store *overrides.Store
	h     http.Handler
	trips *tripCounter // the Store's client
}

// tripCounter counts the round trips a client makes: Do, DoMulti, and
// DoCache calls that rueidis could not answer from its cache.
type tripCounter struct {
	rueidis.Client
	n atomic.Int64
}

func (c *tripCounter) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	c.n.Add(1)
	return c.Client.Do(ctx, cmd)
}

func (c *tripCounter) DoMulti(ctx context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
	c.n.Add(1)
	return c.Client.DoMulti(ctx, cmds...)
}

func (c *tripCounter) DoCache(ctx context.Context, cmd rueidis.Cacheable, ttl time.Duration) rueidis.RedisResult {
	r := c.Client.DoCache(ctx, cmd, ttl)
	if !r.IsCacheHit() {
		c.n.Add(1)
	}
	return r
}

// The plan every replica serves: per-key, 2 per hour for each API key;
// per-tenant, 100 per hour for each tenant.
var (
	perKey    = sluice.Must(sluice.FixedWindow(2, time.Hour)).Named("per-key")
	perTenant = sluice.Must(sluice.GCRA(100, time.Hour, 100)).Named("per-tenant")
)

func newClient(t testing.TB, addrs []string, cache bool) rueidis.Client {
	t.Helper()
	opt := sluice.ClientOption(addrs...)
	opt.DisableCache = !cache
	c, err := rueidis.NewClient(opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// newReplica starts a replica on the Redis at addrs, on the frozen clock
// now (the Limiter's and the Store's: Until is real time, so that Redis
// expires hashes when it should).
func newReplica(t testing.TB, addrs []string, now func() time.Time) *replica {
	t.Helper()
	lim, err := sluice.New(newClient(t, addrs, false), sluice.WithLogger(nil), sluice.WithClock(now),
		sluice.WithSilenceTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lim.Close)
	trips := &tripCounter{Client: newClient(t, addrs, true)}
	store, err := overrides.New(trips, overrides.Options{Clock: now, Logger: quiet, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if !store.ClientCache() {
		t.Fatal("a client with rueidis' cache on, on redis-server: want the client's cache")
	}
	mw, err := httplimit.New(httplimit.Config{Limiter: lim, Overrides: store, Logger: quiet, Clock: now,
		Policies: []httplimit.Policy{
			{Name: "per-key", Limit: perKey, Key: httplimit.APIKey("X-API-Key")},
			{Name: "per-tenant", Limit: perTenant, Key: func(r *http.Request) (string, bool) {
				v := r.Header.Get("X-Tenant")
				return "tenant:" + v, v != ""
			}},
		}})
	if err != nil {
		t.Fatal(err)
	}
	return &replica{store: store, trips: trips, h: mw.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))}
}

// get sends a request with an API key (and a tenant when not "").
func (r *replica) get(apiKey, tenant string) *httptest.ResponseRecorder {
	req := httptest.NewRequest("GET", "/", nil)
	req.Header.Set("X-API-Key", apiKey)
	if tenant != "" {
		req.Header.Set("X-Tenant", tenant)
	}
	rec := httptest.NewRecorder()
	r.h.ServeHTTP(rec, req)
	return rec
}

// commands sums the commands the servers at addrs ran, INFO left out,
// from their command statistics.
func commands(t testing.TB, servers []*redisserver.Server) int64 {
	t.Helper()
	var n int64
	for _, s := range servers {
		out, err := s.Command("INFO", "commandstats")
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(out, "\n") {
			name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
			if !ok || name == "cmdstat_info" {
				continue
			}
			calls, _, _ := strings.Cut(rest, ",")
			v, _ := strconv.ParseInt(calls, 10, 64)
			n += v
		}
	}
	return n
}

func apiKeyID(raw string) string {
	id, _ := ratepolicy.APIKeyKey(raw)
	return id
}

// TestReplicasObey: three replicas, each with its own Limiter, Store and
// middleware, and an operator's fourth client that sets and removes
// overrides. Each replica obeys a change on its first request after the
// change reached it (Store.Sync tells when: the invalidation Redis sent
// has been read), removing an override restores the plan, and a request
// in steady state costs no extra round trip; on one redis-server and on
// a 3-master cluster.
func TestReplicasObey(t *testing.T) {
	t.Run("standalone", func(t *testing.T) {
		s := redisserver.Start(t)
		testReplicasObey(t, []string{s.Addr}, []*redisserver.Server{s})
	})
	t.Run("cluster", func(t *testing.T) {
		c := redisserver.StartCluster(t, 3)
		testReplicasObey(t, c.Addrs(), c.Nodes)
	})
}

func testReplicasObey(t *testing.T, addrs []string, servers []*redisserver.Server) {
	// A frozen clock on the next whole hour: fixed windows start there,
	// and every Until is in the future for Redis too.
	start := time.Now().Truncate(time.Hour).Add(time.Hour)
	now := func() time.Time { return start }
	var fleet []*replica
	for range 3 {
		fleet = append(fleet, newReplica(t, addrs, now))
	}
	admin, err := overrides.New(newClient(t, addrs, false), overrides.Options{Clock: now, Logger: quiet, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// change runs an operator's change, then waits until it has reached
	// every replica.
	change := func(f func() error) {
		t.Helper()
		if err := f(); err != nil {
			t.Fatal(err)
		}
		for _, r := range fleet {
			for _, p := range []string{"per-key", "per-tenant"} {
				if err := r.store.Sync(ctx, p); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	set := func(o overrides.Override) { change(func() error { return admin.Set(ctx, o) }) }
	remove := func(policy, id string) {
		change(func() error {
			ok, err := admin.Remove(ctx, policy, id)
			if err == nil && !ok {
				t.Fatalf("Remove(%s, %s): there was nothing to remove", policy, id)
			}
			return err
		})
	}
	// expect checks one response.
	expect := func(rec *httptest.ResponseRecorder, status int, policy, rateLimit string) {
		t.Helper()
		h := rec.Result().Header
		if rec.Code != status || h.Get("RateLimit-Policy") != policy || h.Get("RateLimit") != rateLimit {
			t.Fatalf("got %d, RateLimit-Policy %q, RateLimit %q; want %d, %q, %q",
				rec.Code, h.Get("RateLimit-Policy"), h.Get("RateLimit"), status, policy, rateLimit)
		}
	}
	// storeTrips is the round trips the replicas' Stores made so far.
	storeTrips := func() (n int64) {
		for _, r := range fleet {
			n += r.trips.n.Load()
		}
		return n
	}
	const plan, tenants = `"per-key";q=2;w=3600`, `"per-tenant";q=100;w=3600`

	// The plan: 2 per hour for key A, whichever replica serves it.
	expect(fleet[0].get("A", ""), 200, plan, `"per-key";r=1;t=3600`)
	expect(fleet[1].get("A", ""), 200, plan, `"per-key";r=0;t=3600`)
	expect(fleet[2].get("A", ""), 429, plan, `"per-key";r=0;t=3600`)

	// A Limit override of 5 per hour: the state carries over (2 used), and
	// the replica that has a denial of A in its cache obeys too.
	set(overrides.Override{Policy: "per-key", Identity: apiKeyID("A"), Kind: overrides.Limit, Rate: 5,
		Until: start.Add(time.Hour), Reason: "upgrade"})
	raised := `"per-key";q=5;w=3600`
	expect(fleet[2].get("A", ""), 200, raised, `"per-key";r=2;t=3600`)
	expect(fleet[0].get("A", ""), 200, raised, `"per-key";r=1;t=3600`)
	expect(fleet[1].get("A", ""), 200, raised, `"per-key";r=0;t=3600`)
	expect(fleet[2].get("A", ""), 429, raised, `"per-key";r=0;t=3600`)

	// Steady state: the Stores answer from the client's cache, without a
	// round trip (a policy without overrides, per-tenant, included), and
	// Redis reads no overrides (HGETALL; the scripts' own GETs hide the
	// version's: TestOverridesCostNothing counts every command).
	var trips, reads int64
	for i := range 33 {
		if i == 3 { // each replica has read per-tenant's overrides (none) once
			trips, reads = storeTrips(), calls(t, servers, "hgetall")
		}
		expect(fleet[i%3].get("B"+strconv.Itoa(i), "U"), 200, plan+", "+tenants,
			`"per-key";r=1;t=3600, "per-tenant";r=`+strconv.Itoa(99-i)+`;t=`+strconv.Itoa(36*(i+1)))
	}
	if n, r := storeTrips()-trips, calls(t, servers, "hgetall")-reads; n != 0 || r != 0 {
		t.Fatalf("30 requests in steady state: %d round trips of the Stores, %d reads of overrides in Redis; want 0", n, r)
	}

	// Removing it restores the plan on every replica.
	remove("per-key", apiKeyID("A"))
	for _, r := range fleet {
		expect(r.get("A", ""), 429, plan, `"per-key";r=0;t=3600`)
	}

	// Exempt: key C makes no check and gets no headers of per-key.
	set(overrides.Override{Policy: "per-key", Identity: apiKeyID("C"), Kind: overrides.Exempt, Reason: "internal"})
	for i := range 3 {
		expect(fleet[i].get("C", ""), 200, "", "") // each replica reads the change
	}
	before := commands(t, servers)
	for i := range 9 {
		expect(fleet[i%3].get("C", ""), 200, "", "")
	}
	if n := commands(t, servers) - before; n != 0 {
		t.Fatalf("9 exempt requests sent %d commands", n)
	}
	remove("per-key", apiKeyID("C"))
	expect(fleet[1].get("C", ""), 200, plan, `"per-key";r=1;t=3600`)

	// Block: tenant T is denied under per-tenant on every replica until
	// its Until, and the request asks Redis nothing, so it charges
	// nothing under per-key either.
	set(overrides.Override{Policy: "per-tenant", Identity: "tenant:T", Kind: overrides.Block,
		Until: start.Add(90 * time.Second), Reason: "abuse"})
	for i, r := range fleet {
		r.get("warm"+strconv.Itoa(i), "T") // each replica reads the change
	}
	before = commands(t, servers)
	for i, r := range fleet {
		rec := r.get("D", "T")
		expect(rec, 429, tenants, `"per-tenant";r=0;t=90`)
		if ra := rec.Result().Header.Get("Retry-After"); ra != "90" {
			t.Fatalf("replica %d: Retry-After %q, want 90", i, ra)
		}
	}
	if n := commands(t, servers) - before; n != 0 {
		t.Fatalf("3 blocked requests sent %d commands", n)
	}
	remove("per-tenant", "tenant:T")
	expect(fleet[2].get("D", "T"), 200, plan+", "+tenants, `"per-key";r=1;t=3600, "per-tenant";r=99;t=36`)
}

// calls sums the calls of the named commands (lower case) the servers
// ran, from their command statistics.
func calls(t testing.TB, servers []*redisserver.Server, names ...string) int64 {
	t.Helper()
	var n int64
	for _, s := range servers {
		out, err := s.Command("INFO", "commandstats")
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(out, "\n") {
			name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
			if !ok || !slices.Contains(names, strings.TrimPrefix(name, "cmdstat_")) {
				continue
			}
			c, _, _ := strings.Cut(rest, ",")
			v, _ := strconv.ParseInt(c, 10, 64)
			n += v
		}
	}
	return n
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))
