package sluice

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-go/sluice/internal/redisserver"
	"github.com/sluice-go/sluice/internal/testsize"
)

// The tests in this file hold the rule of docs/operations.md ("Busy is not
// gone"): a node that answers decides every call; a caller that gives up
// gets its own error and leaves the breaker alone; what a call left behind
// in Redis is reconciled. They run on private redis-servers, with the
// Limiter's defaults unless a test says otherwise.

// latencies is a histogram of call durations, four buckets per doubling.
type latencies struct {
	b   [256]atomic.Int64
	max atomic.Int64
}

func (h *latencies) add(d time.Duration) {
	i := 0
	if d > 1 {
		i = min(int(4*math.Log2(float64(d))), len(h.b)-1)
	}
	h.b[i].Add(1)
	for {
		old := h.max.Load()
		if int64(d) <= old || h.max.CompareAndSwap(old, int64(d)) {
			return
		}
	}
}

// quantile is the upper edge of the bucket holding quantile q.
func (h *latencies) quantile(q float64) time.Duration {
	var total int64
	for i := range h.b {
		total += h.b[i].Load()
	}
	want := int64(math.Ceil(q * float64(total)))
	var seen int64
	for i := range h.b {
		if seen += h.b[i].Load(); seen >= want && seen > 0 {
			return time.Duration(math.Pow(2, float64(i+1)/4))
		}
	}
	return 0
}

func (h *latencies) String() string {
	return fmt.Sprintf("p50 %v, p99 %v, max %v", h.quantile(0.5).Round(time.Microsecond), h.quantile(0.99).Round(time.Microsecond),
		time.Duration(h.max.Load()).Round(time.Microsecond))
}

// transitions is the number of breaker transitions rec saw on node.
func transitions(rec *recorder, node string) int64 {
	var n int64
	for _, st := range []string{"open", "half-open", "closed"} {
		n += rec.get(MetricBreakerTransitions + "{sluice.breaker.state=" + st + ",sluice.node=" + node + "}")
	}
	return n
}

// 512 goroutines on one identity at 100 per hour for 4s (2s unless
// SLUICE_TEST_FULL=1, see internal/testsize), with the defaults, on a real
// redis-server: exactly 100 admitted, every decision from Redis, no
// breaker transition; ten runs on an idle machine (one unless
// SLUICE_TEST_FULL=1), and one with sixteen CPU hogs for the first five
// eighths of the load (Redis slowed, but answering).
func TestExactBurst(t *testing.T) {
	if testing.Short() {
		t.Skip("runs of 2s to 4s")
	}
	s := redisserver.Start(t)
	c := standaloneClient(t, s.Addr)
	const limit = 100
	lim := Must(GCRA(limit, time.Hour, limit))
	load := testsize.Pick(2*time.Second, 4*time.Second)
	run := func(name string, hogs int) {
		rec := newRecorder()
		l, err := New(c, WithLogger(nil), WithMeterProvider(rec))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		id := "burst-" + name
		var lat latencies
		tl := newTally(1)
		if hogs > 0 {
			defer startHogs(t, hogs, load*5/8)()
		}
		stop := startLoad(512, 0, func(w, n int) {
			start := time.Now()
			res, err := l.Allow(context.Background(), id, lim)
			d := time.Since(start)
			lat.add(d)
			tl.note(0, res, err, d)
		})
		time.Sleep(load) // the load's length, not a wait for anything
		stop()
		tr := transitions(rec, "redis")
		timeouts := rec.get(MetricRedisFailures + "{sluice.algorithm=gcra,sluice.failure=timeout,sluice.limit=" + lim.Name + "}")
		t.Logf("%s (%d hogs): %v; latency %v; %d breaker transitions, %d calls past a timeout, %d late charges",
			name, hogs, tl, &lat, tr, timeouts, rec.get(MetricLateCharges+"{sluice.algorithm=gcra,sluice.limit="+lim.Name+"}"))
		if tl.admitted.Load() != limit || tl.degraded.Load() != 0 || tl.errs.Load() != 0 || tr != 0 {
			t.Errorf("%s: %v, %d breaker transitions; want exactly %d admitted, all by Redis, no error, no transition (first error: %v)",
				name, tl, tr, limit, tl.err())
		}
	}
	for i := range testsize.Pick(1, 10) {
		run("idle-"+strconv.Itoa(i), 0)
	}
	run("hogs", 16)
}

// callerDeadlines is 64 goroutines making calls with a deadline of 1ms.
type callerDeadlines struct {
	calls, decided, degraded, deadline, other atomic.Int64
	late                                      latencies // return minus the caller's deadline
	mu                                        sync.Mutex
	otherErr                                  error
}

func (cd *callerDeadlines) String() string {
	return fmt.Sprintf("%d calls: %d decided by Redis, %d DeadlineExceeded, %d degraded, %d other errors; return after the deadline: %v",
		cd.calls.Load(), cd.decided.Load(), cd.deadline.Load(), cd.degraded.Load(), cd.other.Load(), &cd.late)
}

// bare waits for 1ms deadlines with nothing else (<-ctx.Done()) on 16
// goroutines until stop is closed: how late the Go scheduler and the host
// let any waiter return while the load beside it runs, which a call
// through the Limiter cannot beat.
func bare(stop <-chan struct{}) *latencies {
	var late latencies
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
				<-ctx.Done()
				late.add(max(time.Since(start)-time.Millisecond, 0))
				cancel()
			}
		}()
	}
	wg.Wait()
	return &late
}

func (cd *callerDeadlines) run(l *Limiter, lim Limit, perWorker int) {
	var wg sync.WaitGroup
	for w := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range perWorker {
				start := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
				res, err := l.Allow(ctx, "deadline-"+strconv.Itoa(w), lim)
				cd.late.add(max(time.Since(start)-time.Millisecond, 0))
				cancel()
				cd.calls.Add(1)
				switch {
				case err == nil && res.Degraded:
					cd.degraded.Add(1)
				case err == nil:
					cd.decided.Add(1)
				case errors.Is(err, context.DeadlineExceeded):
					cd.deadline.Add(1)
				default:
					cd.other.Add(1)
					cd.mu.Lock()
					cd.otherErr = err
					cd.mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
}

// Callers with 1ms deadlines, 64 at a time, on a healthy Redis, on a
// Redis paused (SIGSTOP) for less than the silence timeout, and beside
// four CPU hogs: every call returns Redis's decision or DeadlineExceeded,
// none is degraded, the breaker never moves, and 99% of the calls return
// within twice the lateness the host gives a bare wait for the same
// deadlines beside them plus 5ms (the bare wait's p99 is about 1ms on an
// idle machine; beside CPU hogs, or with the cores saturated by other
// work, the scheduler alone makes it 12–20ms, which no limiter can undo).
func TestCallerDeadlinesExact(t *testing.T) {
	s := redisserver.Start(t)
	c := standaloneClient(t, s.Addr)
	lim := Must(GCRA(1_000_000_000, time.Hour, 1_000_000_000))
	for _, phase := range []string{"healthy", "paused", "hogs"} {
		t.Run(phase, func(t *testing.T) {
			rec := newRecorder()
			l, err := New(c, WithLogger(nil), WithMeterProvider(rec))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			var cd callerDeadlines
			if phase == "hogs" {
				defer startHogs(t, 4, time.Minute)()
			}
			stopBare := make(chan struct{})
			hostc := make(chan *latencies)
			go func() { hostc <- bare(stopBare) }()
			switch phase {
			case "paused":
				if err := s.Pause(); err != nil {
					t.Fatal(err)
				}
				resume := time.AfterFunc(300*time.Millisecond, func() { _ = s.Resume() })
				defer resume.Stop()
				defer s.Resume()
			}
			cd.run(l, lim, 100)
			close(stopBare)
			host := <-hostc
			tr := transitions(rec, "redis")
			t.Logf("%s: %v; %d breaker transitions; a bare wait for the same deadlines returned after them: %v", phase, &cd, tr, host)
			if cd.degraded.Load() != 0 || cd.other.Load() != 0 || tr != 0 {
				t.Errorf("%s: %v, %d transitions; want none degraded, no other error, no transition (other: %v)", phase, &cd, tr, cd.otherErr)
			}
			// On a loaded host every goroutine waits for the scheduler,
			// and a call, which does more work after its deadline than a
			// bare wait (it returns through the pipeline), waits more
			// often: the bound is twice the bare wait's p99 plus 5ms
			// (about 7ms on an idle machine).
			p99, base := cd.late.quantile(0.99), host.quantile(0.99)
			bound := 2*base + 5*time.Millisecond
			if p99 > bound {
				t.Errorf("%s: 99%% of the calls returned within %v of their deadline, want %v (a bare wait's p99 is %v)", phase, p99, bound, base)
			}
		})
	}
}

// 1,000 Acquire calls cancelled at random points (before the call is
// sent, while it is out, after the script ran), and 1,000 Releases with
// cancelled contexts (cancelled before the call, or while it is out): no
// slot stays taken.
func TestLeasesNotLeaked(t *testing.T) {
	s := redisserver.Start(t)
	c := standaloneClient(t, s.Addr)
	l, err := New(c, WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	lim := Must(Concurrency(1_000_000, time.Hour))
	const id, calls, workers = "leases", 1000, 20
	key := l.Key(id, lim)
	// A round trip on this machine now, to spread the cancellations over.
	start := time.Now()
	if _, err := s.Command("PING"); err != nil {
		t.Fatal(err)
	}
	rtt := time.Since(start)
	ctx := context.Background()
	var cutAcquires, cutReleases, acquired atomic.Int64
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	// cutShort is a context cancelled before the call (one in eight) or
	// at a random moment within a few round trips.
	cutShort := func(rng *rand.Rand) (context.Context, context.CancelFunc) {
		cctx, cancel := context.WithCancel(ctx)
		if rng.IntN(8) == 0 {
			cancel()
		} else {
			time.AfterFunc(time.Duration(rng.Int64N(int64(4*rtt))), cancel)
		}
		return cctx, cancel
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for range calls / workers {
				// An Acquire cut short; if it got its lease anyway, the
				// caller releases it as usual.
				actx, cancel := cutShort(rng)
				lease, res, err := l.Acquire(actx, id, lim)
				cancel()
				if err != nil {
					cutAcquires.Add(1)
				} else if res.Allowed {
					if err := l.Release(ctx, lease); err != nil {
						t.Errorf("Release: %v", err)
					}
				}
				// An Acquire that completes, and a Release cut short.
				lease, res, err = l.Acquire(ctx, id, lim)
				if err != nil || !res.Allowed || res.Degraded {
					t.Errorf("Acquire: %+v, %v", res, err)
					continue
				}
				acquired.Add(1)
				rctx, rcancel := cancelled, context.CancelFunc(func() {})
				if rng.IntN(2) == 0 {
					rctx, rcancel = cutShort(rng)
				}
				if err := l.Release(rctx, lease); err != nil {
					cutReleases.Add(1)
				}
				rcancel()
			}
		}()
	}
	wg.Wait()
	holders := func() int64 {
		n, err := s.Command("ZCARD", key)
		if err != nil {
			t.Fatal(err)
		}
		v, _ := strconv.ParseInt(n, 10, 64)
		return v
	}
	took, ok := waitFor(10*time.Second, func() bool { return holders() == 0 })
	t.Logf("round trip %v: %d Acquires cut short (%d returned the caller's error); %d Releases of %d leases with cancelled contexts (%d returned the caller's error); every slot free %v after the last call (%v)",
		rtt.Round(time.Microsecond), calls, cutAcquires.Load(), calls, acquired.Load(), cutReleases.Load(), took.Round(time.Millisecond), ok)
	if !ok {
		t.Fatalf("%d slots still taken 10s after the last call", holders())
	}
	if took > 2*time.Second {
		t.Errorf("the slots were given back %v after the last call, want within 2s", took)
	}
	if cutAcquires.Load() == 0 || cutReleases.Load() == 0 {
		t.Errorf("no call was cut short (%d Acquires, %d Releases): the test tests nothing", cutAcquires.Load(), cutReleases.Load())
	}
}

// A key holding another type (a string where a sliding log keeps a sorted
// set, or a concurrency limit its holders) fails that call alone, with
// ErrWrongType naming the key; the breaker does not move and other
// identities are decided by Redis. (The string-state scripts, GCRA and the
// windows, read a key of another type as empty and replace it.)
func TestWrongType(t *testing.T) {
	s := redisserver.Start(t)
	c := standaloneClient(t, s.Addr)
	rec := newRecorder()
	l, err := New(c, WithLogger(nil), WithMeterProvider(rec))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	lim := Must(SlidingLog(10, time.Second))
	conc := Must(Concurrency(10, time.Second))
	bad := l.Key("bad", lim)
	for _, k := range []string{bad, l.Key("bad", conc)} {
		if _, err := s.Command("SET", k, "x"); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 10 { // twice the breaker's threshold
		r, err := l.Allow(ctx, "bad", lim)
		if !errors.Is(err, ErrWrongType) || !strings.Contains(err.Error(), bad) || r != (Result{}) {
			t.Fatalf("call %d on %s: %+v, %v; want ErrWrongType naming the key", i, bad, r, err)
		}
	}
	if _, _, err := l.Acquire(ctx, "bad", conc); !errors.Is(err, ErrWrongType) || !strings.Contains(err.Error(), l.Key("bad", conc)) {
		t.Fatalf("Acquire over a string: %v; want ErrWrongType naming the key", err)
	}
	if r, err := l.Allow(ctx, "good", lim); err != nil || r.Degraded || !r.Allowed {
		t.Fatalf("another identity: %+v, %v; want a decision by Redis", r, err)
	}
	if err := l.Health().Err(); err != nil || transitions(rec, "redis") != 0 {
		t.Fatalf("after WRONGTYPE: %v, %d transitions; want the breaker untouched", err, transitions(rec, "redis"))
	}
	if err := l.Reset(ctx, "bad", lim); err != nil {
		t.Fatal(err)
	}
	if r, err := l.Allow(ctx, "bad", lim); err != nil || !r.Allowed {
		t.Fatalf("after Reset: %+v, %v", r, err)
	}
}

// goroutineIDs lists the goroutines alive whose stack holds a function of
// this package other than a test's (a goroutine the Limiter started), with
// their stacks.
func ourGoroutines() map[int]string {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	head := regexp.MustCompile(`^goroutine (\d+) `)
	out := map[int]string{}
	for _, g := range strings.Split(string(buf), "\n\n") {
		m := head.FindStringSubmatch(g)
		if m == nil || !strings.Contains(g, "github.com/sluice-go/sluice.") || strings.Contains(g, "testing.tRunner") {
			continue
		}
		id, _ := strconv.Atoi(m[1])
		out[id] = g
	}
	return out
}

// Close ends every goroutine the Limiter started (calls in flight on a
// paused Redis, fliers waiting for work, the release queue, probes) and
// later calls return ErrClosed.
func TestCloseEndsGoroutines(t *testing.T) {
	s := redisserver.Start(t)
	c := standaloneClient(t, s.Addr)
	before := ourGoroutines()
	l, err := New(c, WithLogger(nil), WithSilenceTimeout(50*time.Millisecond), WithBreaker(1, time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	lim := Must(GCRA(1000, time.Second, 1000))
	conc := Must(Concurrency(10, time.Hour))
	stop := startLoad(16, 0, func(w, n int) {
		l.Allow(ctx, "close-"+strconv.Itoa(w), lim)
		if lease, r, err := l.Acquire(ctx, "close", conc); err == nil && r.Allowed {
			cctx, cancel := context.WithCancel(ctx)
			cancel()
			l.Release(cctx, lease)
		}
	})
	waitFor(time.Second, func() bool { return len(ourGoroutines()) > len(before)+8 })
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	defer s.Resume()
	// Calls wait on the paused node, the breaker opens, probes go out.
	waitFor(5*time.Second, func() bool { return breakerOf(l, "redis") != "closed" })
	running := len(ourGoroutines()) - len(before)
	closed := make(chan struct{})
	go func() { l.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return within 10s")
	}
	stop()
	if _, err := l.Allow(ctx, "after", lim); !errors.Is(err, ErrClosed) {
		t.Fatalf("Allow after Close: %v; want ErrClosed", err)
	}
	var left map[int]string
	if _, ok := waitFor(5*time.Second, func() bool {
		left = ourGoroutines()
		for id := range before {
			delete(left, id)
		}
		return len(left) == 0
	}); !ok {
		ids := slices.Sorted(func(yield func(int) bool) {
			for id := range left {
				if !yield(id) {
					return
				}
			}
		})
		t.Fatalf("%d goroutines left after Close (%d ran before it); the first:\n%s", len(left), running, left[ids[0]])
	}
	t.Logf("%d goroutines of the Limiter's (beside the load's) before Close, none after", running)
}
