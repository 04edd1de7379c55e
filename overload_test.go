package sluice

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-go/sluice/internal/redisserver"
	"github.com/sluice-go/sluice/internal/testsize"
)

// hogEnv makes the test binary a CPU hog: it spins for the duration given
// and exits, before any test runs. The overload test starts its hogs so.
const hogEnv = "SLUICE_TEST_CPU_HOG"

var hogSink uint64

func init() {
	if v := os.Getenv(hogEnv); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			os.Exit(2)
		}
		end := time.Now().Add(d)
		for time.Now().Before(end) {
			for i := uint64(0); i < 1<<20; i++ {
				hogSink += i
			}
		}
		os.Exit(0)
	}
}

// startHogs starts n busy-loop processes (this test binary re-executed as
// a hog), each ending by itself after life at the latest. The returned
// stop kills them by PID and waits for them; test cleanup calls it too.
func startHogs(t *testing.T, n int, life time.Duration) (stop func()) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var cmds []*exec.Cmd
	stop = func() {
		for _, c := range cmds {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
		cmds = nil
	}
	t.Cleanup(stop)
	for i := 0; i < n; i++ {
		c := exec.Command(exe, "-test.run=^$")
		c.Env = append(os.Environ(), hogEnv+"="+life.String(), "GOMAXPROCS=1")
		if err := c.Start(); err != nil {
			stop()
			t.Fatalf("start CPU hog: %v", err)
		}
		cmds = append(cmds, c)
	}
	return stop
}

// overloadRun is what one overload run saw.
type overloadRun struct {
	rate                                          *tally
	acquired, acquiredLocal, leaseDenied, relErrs atomic.Int64
	holdersLeft, localLeft                        int64
	leftIDs                                       map[string]int // why each holder left in Redis is there
	failedRelease, localLease                     sync.Map       // lease IDs
	acquireTimeouts                               int64
	transitions                                   map[string]int64
	closeAfter                                    time.Duration
	closed                                        bool
}

func (r *overloadRun) String() string {
	return fmt.Sprintf("rate limit: %v (from Redis %d, local %d); concurrency: %d acquired (%d local), %d denied, %d failed releases, %d acquires timed out, %d holders left in Redis %v and %d in the local fallback; breaker transitions %v; all breakers closed %v after the hogs stopped (%v)",
		r.rate, r.rate.redisAdmits[0].Load(), r.rate.localAdmits[0].Load(), r.acquired.Load(), r.acquiredLocal.Load(), r.leaseDenied.Load(), r.relErrs.Load(),
		r.acquireTimeouts, r.holdersLeft, r.leftIDs, r.localLeft, r.transitions, r.closeAfter.Round(time.Millisecond), r.closed)
}

// Overload is not an outage. With sixteen busy-loop processes beside it on
// this machine's cores, 448 goroutines calling Allow on one identity at
// 100 per hour and 64 taking and releasing slots of a Concurrency(16)
// limit, for 4s, with the defaults: Redis answers throughout, so the
// identity is admitted exactly 100 times, every rate decision by Redis,
// and no lease leaks (every slot is free after the holders release, in
// Redis and in the local fallback). The same load with a bound
// of 100ms on each call (WithTimeout) and FailOpen, the settings of
// earlier versions, is measured and logged for comparison, not asserted
// (with SLUICE_TEST_FULL only).
func TestOverload(t *testing.T) {
	if testing.Short() {
		t.Skip("overload test: 4s of load beside sixteen CPU hogs, twice")
	}
	s := redisserver.Start(t)
	c := standaloneClient(t, s.Addr)
	const (
		limit   = 100
		slots   = 16
		hogs    = 16
		load    = 4 * time.Second
		workers = 512
		holders = 64
	)
	lim := Must(GCRA(limit, time.Hour, limit))
	conc := Must(Concurrency(slots, time.Hour))

	run := func(name string, extra ...Option) *overloadRun {
		rec := newRecorder()
		l, err := New(c, append([]Option{WithLogger(nil), WithMeterProvider(rec)}, extra...)...)
		if err != nil {
			t.Fatal(err)
		}
		id, holderID := "overload-"+name, "overload-"+name+"-conc"
		r := &overloadRun{rate: newTally(1)}
		stopHogs := startHogs(t, hogs, 4*load)
		ctx := context.Background()
		stop := startLoad(workers, 0, func(w, n int) {
			if w >= holders {
				start := time.Now()
				res, err := l.Allow(ctx, id, lim)
				r.rate.note(0, res, err, time.Since(start))
				return
			}
			lease, res, err := l.Acquire(ctx, holderID, conc)
			if err != nil || !res.Allowed {
				r.leaseDenied.Add(1)
				return
			}
			r.acquired.Add(1)
			if res.Degraded {
				r.acquiredLocal.Add(1)
			}
			runtime.Gosched() // hold the slot a moment
			if res.Degraded {
				r.localLease.Store(lease.ID, true)
			}
			if err := l.Release(ctx, lease); err != nil {
				r.relErrs.Add(1)
				r.failedRelease.Store(lease.ID, true)
			}
		})
		time.Sleep(load)
		stopHogs()
		r.closeAfter, r.closed = waitFor(10*time.Second, func() bool { return l.Health().Err() == nil })
		stop()
		// Slots that timed-out Acquires or failed Releases left in Redis
		// are given back in the background once Redis answers: wait for it.
		waitFor(10*time.Second, func() bool {
			n, err := s.Command("ZCARD", l.Key(holderID, conc))
			if err == nil {
				r.holdersLeft, _ = strconv.ParseInt(n, 10, 64)
			}
			return err == nil && r.holdersLeft == 0
		})
		r.leftIDs = map[string]int{}
		if m, err := s.Command("ZRANGE", l.Key(holderID, conc), "0", "-1"); err == nil && m != "" {
			for _, id := range strings.Split(m, "\n") {
				_, fr := r.failedRelease.Load(id)
				_, ll := r.localLease.Load(id)
				switch {
				case fr:
					r.leftIDs["failed release"]++
				case ll:
					r.leftIDs["timed-out acquire, admitted locally"]++
				default:
					r.leftIDs["timed-out acquire, denied locally"]++
				}
			}
		}
		r.acquireTimeouts = rec.get(MetricRedisFailures + "{sluice.algorithm=concurrency,sluice.failure=timeout,sluice.limit=" + conc.Name + "}")
		if local, ok := l.e.policy.(*localFallback); ok {
			_, left := local.size()
			r.localLeft = int64(left)
		}
		r.transitions = map[string]int64{}
		for _, st := range []string{"open", "half-open", "closed"} {
			r.transitions[st] = rec.get(MetricBreakerTransitions + "{sluice.breaker.state=" + st + ",sluice.node=redis}")
		}
		t.Logf("%s, %d hogs, %d goroutines for %v: %v", name, hogs, workers, load, r)

		if r.closed {
			// Every slot is free again: a fresh holder gets all of them from Redis.
			for i := 0; i < slots; i++ {
				lease, res, err := l.Acquire(ctx, holderID, conc)
				if err != nil || !res.Allowed || res.Degraded {
					r.holdersLeft = -1 - int64(i) // reported below
					break
				}
				defer l.Release(ctx, lease)
			}
		}
		return r
	}

	cur := run("defaults")
	if testsize.Full() { // a comparison, logged and not asserted: with SLUICE_TEST_FULL (CI) only
		old := run("bounded", WithTimeout(100*time.Millisecond), WithFailurePolicy(FailOpen))
		t.Logf("admitted on one identity at %d/h: %d with the defaults (FailLocal, no bound on a node that answers), %d with a 100ms bound and FailOpen",
			limit, cur.rate.admitted.Load(), old.rate.admitted.Load())
	}

	if cur.rate.errs.Load() != 0 {
		t.Errorf("%d calls returned errors (first: %v)", cur.rate.errs.Load(), cur.rate.err())
	}
	if n := cur.rate.redisAdmits[0].Load(); n != limit {
		t.Errorf("Redis admitted %d, limit %d", n, limit)
	}
	if n := cur.rate.degraded.Load(); n != 0 && cur.transitions["open"] == 0 {
		t.Errorf("%d rate decisions came from the local fallback while Redis answered", n)
	} else if n != 0 {
		t.Logf("%d rate decisions came from the local fallback after the breaker opened (see below)", n)
	}
	// The breaker and the leases are reported, not asserted: beside a
	// second suite's CPU hogs, the 448 goroutines spinning on the denial
	// cache kept the goroutine that reads replies from a core for seconds,
	// which inside the process cannot be told from a silent Redis (once in
	// several runs: the breaker opened and 24 leases were local; the rate
	// limit held at exactly 100). TestExactBurst asserts no transition for
	// the same burst without the concurrency holders.
	if !cur.closed {
		t.Errorf("a breaker was still open %v after the hogs stopped", cur.closeAfter)
	}
	if cur.localLeft != 0 {
		t.Errorf("%d local leases left after every holder released", cur.localLeft)
	}
	// A Release that fails returns an error (documented); what must not
	// happen is a slot that stays taken after every holder released.
	if cur.holdersLeft != 0 {
		if cur.holdersLeft < 0 {
			t.Errorf("after the load only %d of %d slots could be taken: leases leaked", -1-cur.holdersLeft, slots)
		} else {
			t.Errorf("%d holders left in Redis after every holder released (%v): leases leaked", cur.holdersLeft, cur.leftIDs)
		}
	}
}
