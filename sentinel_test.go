package sluice

import (
	"context"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice/internal/redisserver"
)

// A Sentinel failover under load: three Sentinels, a primary and one
// replica; the primary is killed (SIGKILL), the Sentinels promote the
// replica, and rueidis (with Sentinel options) follows them. Meanwhile the
// failure policy decides; afterwards decisions come from the new primary
// again. The state the new primary lacks is what asynchronous replication
// had not copied when the primary died: the test counts it by comparing
// the admissions Redis reported before the kill with the counts the new
// primary holds.
func TestFaultSentinelFailover(t *testing.T) {
	t.Parallel() // its own servers; no timing it asserts depends on a quiet machine
	st := redisserver.StartSentinel(t)
	c, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress:  st.Addrs(),
		Sentinel:     rueidis.SentinelOption{MasterSet: st.MasterSet},
		DisableCache: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := New(c, WithLogger(nil), WithClock(runningClock())) // the defaults otherwise
	if err != nil {
		t.Fatal(err)
	}
	lim := Must(FixedWindow(1_000_000_000, time.Hour)) // never denies: its count is every charge
	ids := idents("sentinel", 8)
	tl := newTally(len(ids))
	stop := allowLoad(context.Background(), l, ids, lim, tl, time.Millisecond)
	defer stop()
	if _, ok := waitFor(10*time.Second, func() bool { return tl.decisions.Load() >= 2000 }); !ok {
		t.Fatalf("no load before the kill: %v", tl)
	}
	var before int64
	for i := range ids {
		before += tl.redisAdmits[i].Load()
	}
	if err := st.Primary.Kill(); err != nil {
		t.Fatal(err)
	}
	killedAt := time.Now()
	var atKill int64
	for i := range ids {
		atKill += tl.redisAdmits[i].Load()
	}
	// The Sentinels agree the primary is down after SentinelDownAfter,
	// then elect a leader and promote the replica.
	promoted, ok := waitFor(60*time.Second, func() bool {
		addr, err := st.PrimaryAddr()
		return err == nil && addr == st.Replica.Addr
	})
	if !ok {
		t.Fatalf("the replica was not promoted within %v", promoted)
	}
	switched := time.Now()
	resumed, ok := waitFor(30*time.Second, func() bool { return tl.lastRedis.Load() > switched.UnixNano() })
	if !ok {
		t.Fatalf("no decision from Redis within %v of the promotion: %+v; %v", resumed, l.Health(), tl)
	}
	resumedAt, degradedAtResume := time.Now(), tl.degraded.Load()
	time.Sleep(300 * time.Millisecond) // a little load on the new primary (not needed for correctness)
	stop()

	// What the new primary holds, against what Redis reported admitting.
	var admitted, held int64
	for i, id := range ids {
		admitted += tl.redisAdmits[i].Load()
		held += fixedWindowCount(t, st.Replica, l.Key(id, lim))
	}
	after := admitted - atKill // admitted by the new primary (and by the old one after atKill was read)
	t.Logf("Sentinel failover under %d goroutines: %v", loadWorkers, tl)
	t.Logf("primary killed: replica promoted %v later (down-after %v); decisions from the new primary %v after the promotion (%v after the kill); %d degraded decisions until then",
		promoted.Round(time.Millisecond), redisserver.SentinelDownAfter, resumed.Round(time.Millisecond), resumedAt.Sub(killedAt).Round(time.Millisecond), degradedAtResume)
	t.Logf("state: %d admissions reported by the old primary, %d by the new; the new primary holds %d charges, %+d against those reported (negative: writes of the old primary that never reached the replica; positive: calls Redis ran whose replies never came back)",
		atKill, after, held, held-atKill-after)
	if tl.errs.Load() != 0 {
		t.Fatalf("%d calls returned errors (first: %v)", tl.errs.Load(), tl.err())
	}
	if before == 0 || after == 0 {
		t.Fatalf("admissions from Redis: %d before the kill, %d after the failover", before, after)
	}
	// Replication is asynchronous: the new primary may lack the last
	// writes of the old one, never more than the old one made. It may hold
	// a few charges nobody was told of (calls that timed out after Redis
	// ran them), never more than the calls that failed.
	if held < after || held > atKill+after+tl.degraded.Load() {
		t.Fatalf("the new primary holds %d charges for %d + %d admissions and %d failed calls", held, atKill, after, tl.degraded.Load())
	}
}
