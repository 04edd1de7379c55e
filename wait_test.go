package sluice

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice/internal/redisserver"
	"github.com/sluice-go/sluice/internal/testsize"
)

// reserveModel is GCRA with reservations, in plain Go, for a limit whose
// emission interval T is a whole number of µs: tat is the theoretical
// arrival time; a reservation of cost c conforms at max(tat, now) + cT -
// burst*T and moves tat by cT; a cancel before it conforms gives back cT
// less the emissions booked after it.
type reserveModel struct {
	t, burst int64 // T and burst
	tat      int64
}

type modelRes struct {
	ok           bool
	delay, wrote int64 // wrote: the tat after it
	at, cost     int64
}

func (m *reserveModel) reserve(now, cost, maxWait int64) modelRes {
	if cost > m.burst {
		return modelRes{}
	}
	tat := max(m.tat, now)
	wait := max(tat+cost*m.t-m.burst*m.t-now, 0)
	if wait > maxWait {
		return modelRes{delay: wait}
	}
	m.tat = tat + cost*m.t
	return modelRes{ok: true, delay: wait, wrote: m.tat, at: now + wait, cost: cost}
}

func (m *reserveModel) cancel(now int64, r modelRes) {
	if !r.ok || now >= r.at {
		return
	}
	later := m.tat - r.wrote
	if back := r.cost*m.t - later; later >= 0 && back > 0 {
		m.tat -= back
	}
}

// TestReserveMatchesModel drives random Reserve, Cancel and Allow calls on
// a virtual clock and checks every reservation — made or not, and its
// exact delay — against the model: waiters are booked in order, a
// reservation never books further ahead than its maximum wait, a Cancel
// gives back exactly what no later reservation holds, and Allow shares the
// one state.
func TestReserveMatchesModel(t *testing.T) {
	// A token bucket of the same rate and capacity is the same limit: one
	// model for both.
	for _, lim := range []Limit{Must(GCRA(4, time.Second, 3)), Must(TokenBucket(4, time.Second, 3))} { // T = 250ms
		t.Run(string(lim.Algorithm), func(t *testing.T) { reserveMatchesModel(t, lim) })
	}
}

func reserveMatchesModel(t *testing.T, lim Limit) {
	ctx := context.Background()
	for seed := uint64(1); seed <= 4; seed++ {
		l, m, clk, _ := miniLimiter(t, WithDenialCache(0))
		rng := rand.New(rand.NewPCG(seed, 3))
		model := &reserveModel{t: 250_000, burst: 3}
		type held struct {
			r *Reservation
			m modelRes
		}
		var open []held
		made, refused, cancelled := 0, 0, 0
		for step := 0; step < 300; step++ {
			clk.add(time.Duration(rng.Int64N(300_000)) * time.Microsecond)
			clk.set(m)
			now := clk.now().UnixMicro()
			switch op := rng.IntN(10); {
			case op < 6:
				cost, maxWait := 1+rng.Int64N(3), rng.Int64N(2_000_000)
				r, err := l.ReserveN(ctx, "worker", lim, cost, time.Duration(maxWait)*time.Microsecond)
				if err != nil {
					t.Fatal(err)
				}
				want := model.reserve(now, cost, maxWait)
				if r.OK != want.ok || r.Delay() != time.Duration(want.delay)*time.Microsecond {
					t.Fatalf("seed %d step %d: ReserveN(cost %d, max wait %dµs) = OK %v delay %v; the model says %v, %dµs",
						seed, step, cost, maxWait, r.OK, r.Delay(), want.ok, want.delay)
				}
				if r.OK {
					made++
					open = append(open, held{r, want})
				} else {
					refused++
				}
			case op < 8 && len(open) > 0:
				i := rng.IntN(len(open))
				h := open[i]
				open = slices.Delete(open, i, i+1)
				if err := h.r.Cancel(ctx); err != nil {
					t.Fatal(err)
				}
				model.cancel(now, h.m)
				cancelled++
			default:
				// Allow on the same state: admitted exactly when a
				// reservation of 1 would conform now.
				res, err := l.Allow(ctx, "worker", lim)
				if err != nil {
					t.Fatal(err)
				}
				probe := *model
				if want := probe.reserve(now, 1, 0); res.Allowed != want.ok {
					t.Fatalf("seed %d step %d: Allow = %v, the model says %v", seed, step, res.Allowed, want.ok)
				}
				if res.Allowed {
					model.reserve(now, 1, 0)
				}
			}
		}
		t.Logf("seed %d: %d reservations made, %d refused, %d cancelled", seed, made, refused, cancelled)
		if made == 0 || refused == 0 || cancelled == 0 {
			t.Fatalf("seed %d: the sequence did not cover made, refused and cancelled reservations", seed)
		}
	}
}

// TestWaitPastDeadline: a Wait that cannot conform before its context's
// deadline returns at once with ErrNotReserved (and
// context.DeadlineExceeded), and charges nothing.
func TestWaitPastDeadline(t *testing.T) {
	l, _, _, _ := miniLimiter(t)
	lim := Must(GCRA(1, time.Hour, 1))
	ctx := context.Background()
	if _, err := l.Wait(ctx, "w", lim); err != nil { // the burst: at once
		t.Fatal(err)
	}
	before, err := l.AllowN(ctx, "w", lim, 0)
	if err != nil {
		t.Fatal(err)
	}
	dctx, cancel := context.WithTimeout(ctx, time.Minute) // far short of the hour the next needs
	defer cancel()
	r, err := l.Wait(dctx, "w", lim)
	if !errors.Is(err, ErrNotReserved) || !errors.Is(err, context.DeadlineExceeded) || r.OK {
		t.Fatalf("Wait past the deadline: %+v, %v", r, err)
	}
	if dctx.Err() != nil {
		t.Fatal("Wait waited for the deadline instead of returning at once")
	}
	if d := r.Delay(); d < 59*time.Minute {
		t.Fatalf("the wait it would need: %v, want about an hour", d)
	}
	after, err := l.AllowN(ctx, "w", lim, 0)
	if err != nil || after.ResetAfter != before.ResetAfter {
		t.Fatalf("the refused Wait charged: before %+v, after %+v, %v", before, after, err)
	}
}

// TestCancelAfterPartialUse: of three reservations booked in a row (the
// first conforming now), cancelling the middle one gives back only what
// the third does not hold after it, cancelling the third gives back its
// own, and a reservation that conforms already gives back nothing; each
// checked by the wait of the next reservation, against the model.
func TestCancelAfterPartialUse(t *testing.T) {
	for _, lim := range []Limit{Must(GCRA(10, time.Second, 2)), Must(TokenBucket(10, time.Second, 2))} { // T = 100ms, bursts of 2
		t.Run(string(lim.Algorithm), func(t *testing.T) { cancelAfterPartialUse(t, lim) })
	}
}

func cancelAfterPartialUse(t *testing.T, lim Limit) {
	l, m, clk, _ := miniLimiter(t, WithDenialCache(0))
	ctx := context.Background()
	model := &reserveModel{t: 100_000, burst: 2}
	reserve := func(cost int64) (*Reservation, modelRes) {
		t.Helper()
		r, err := l.ReserveN(ctx, "p", lim, cost, time.Minute)
		if err != nil || !r.OK {
			t.Fatalf("%+v %v", r, err)
		}
		return r, model.reserve(clk.now().UnixMicro(), cost, 60_000_000)
	}
	next := func() time.Duration {
		t.Helper()
		probe, err := l.ReserveN(ctx, "p", lim, 1, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		d := probe.Delay()
		if err := probe.Cancel(ctx); err != nil {
			t.Fatal(err)
		}
		return d
	}
	first, mf := reserve(1)
	mid, mm := reserve(2)
	last, ml := reserve(1)
	if first.Delay() != 0 || mid.Delay() != 100*time.Millisecond || last.Delay() != 200*time.Millisecond {
		t.Fatalf("delays %v %v %v, want 0 100ms 200ms", first.Delay(), mid.Delay(), last.Delay())
	}
	clk.add(50 * time.Millisecond)
	clk.set(m)
	now := clk.now().UnixMicro()
	check := func(what string) {
		t.Helper()
		probe := *model
		want := probe.reserve(clk.now().UnixMicro(), 1, 3_600_000_000)
		if got := next(); got != time.Duration(want.delay)*time.Microsecond {
			t.Fatalf("%s: the next reservation waits %v, the model %dµs", what, got, want.delay)
		}
	}
	check("all three held")
	for _, c := range []struct {
		what string
		r    *Reservation
		m    modelRes
	}{{"cancel the middle one", mid, mm}, {"cancel the last", last, ml}, {"cancel the first, which conforms", first, mf}} {
		if err := c.r.Cancel(ctx); err != nil {
			t.Fatal(err)
		}
		model.cancel(now, c.m)
		check(c.what)
	}
}

// TestCancelAt: a reservation that conforms by now gives nothing back to
// Cancel, but CancelAt a moment before it conforms gives back what it
// would have then — here its whole cost, so an Allow now admits where the
// control (Cancel) still denies. The Limiter runs on Redis TIME, whose
// (virtual) clock is far from the Limiter's own: CancelAt's t is carried
// across by the reservation's offset.
func TestCancelAt(t *testing.T) {
	ctx := context.Background()
	for _, lim := range []Limit{Must(GCRA(10, time.Second, 1)), Must(TokenBucket(10, time.Second, 1))} { // T = 100ms
		t.Run(string(lim.Algorithm), func(t *testing.T) {
			m := miniredis.RunT(t)
			clk := newClock(time.Unix(1_700_000_000, 0)) // Redis's clock, years behind the Limiter's
			clk.set(m)
			l, err := New(miniClient(t, m), quiet...)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			for _, at := range []bool{false, true} {
				id := fmt.Sprintf("cancel-at-%v", at)
				first, err := l.Reserve(ctx, id, lim, time.Second)
				if err != nil || !first.OK || first.Delay() != 0 {
					t.Fatalf("first: %+v, %v", first, err)
				}
				second, err := l.Reserve(ctx, id, lim, time.Second)
				if err != nil || !second.OK {
					t.Fatalf("second: %+v, %v", second, err)
				}
				conforms := second.at
				clk.add(150 * time.Millisecond) // past the second's moment, on Redis's clock
				clk.set(m)
				if at {
					err = second.CancelAt(ctx, conforms.Add(-50*time.Millisecond))
				} else {
					err = second.Cancel(ctx)
				}
				if err != nil {
					t.Fatal(err)
				}
				r, err := l.Allow(ctx, id, lim)
				if err != nil {
					t.Fatal(err)
				}
				if r.Allowed != at {
					t.Fatalf("CancelAt %v: Allow 150ms after two reservations = %v, want %v", at, r.Allowed, at)
				}
				clk.add(time.Second)
				clk.set(m)
			}
		})
	}
}

// TestWaitFleet: 4 processes (this test binary run again as a worker: a
// fleet shares nothing but Redis) × 32 goroutines call WaitN against
// 100/s, bursts of 10, for 10 s (3 s unless SLUICE_TEST_FULL=1, see
// internal/testsize), on a real redis-server (a GCRA limit) and
// on a 3-master cluster (a token bucket). The moments Redis booked (on its
// clock) number rate × duration + burst, ±1%, and no 1-second window holds
// more than 100 + burst; the goroutines' own wake-up times, which a loaded
// machine delays, are reported. The processes start the run together once
// each is connected, and go on fleetSlack past the counted window, so a slow
// start or a late wake-up takes nothing from the count.
func TestWaitFleet(t *testing.T) {
	if os.Getenv(fleetEnv) != "" {
		fleetWorker(t)
		return
	}
	// Its processes book on Redis' clock and count there: other tests
	// beside it slow their wake-ups, not the count.
	t.Parallel()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	s := redisserver.Start(t)
	cl := redisserver.StartCluster(t, 3)
	for _, tc := range []struct {
		name  string
		addrs []string
		lim   Limit
	}{
		{"standalone", []string{s.Addr}, Must(GCRA(fleetRate, time.Second, fleetBurst))},
		{"cluster", cl.Addrs(), Must(TokenBucket(fleetRate, time.Second, fleetBurst))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const procs = 4
			dur := testsize.Pick(3*time.Second, 10*time.Second)
			name := fmt.Sprintf("fleet-%d", time.Now().UnixNano())
			dir := t.TempDir()
			cmds := make([]*exec.Cmd, procs)
			stdins := make([]io.WriteCloser, procs)
			copied := make([]chan struct{}, procs)
			var outs, errs [procs]bytes.Buffer
			t.Cleanup(func() {
				for p, c := range cmds {
					if c != nil && c.ProcessState == nil {
						_ = stdins[p].Close() // a worker not yet started sees EOF and stops
						<-copied[p]
						_ = c.Wait()
					}
				}
			})
			for p := range cmds {
				c := exec.Command(exe, "-test.run=^TestWaitFleet$", "-test.count=1")
				c.Env = append(os.Environ(), fleetEnv+"="+strings.Join([]string{
					strings.Join(tc.addrs, ","), string(tc.lim.Algorithm), name, filepath.Join(dir, strconv.Itoa(p))}, ";"))
				c.Stderr = &errs[p]
				in, err := c.StdinPipe()
				if err != nil {
					t.Fatal(err)
				}
				out, err := c.StdoutPipe()
				if err != nil {
					t.Fatal(err)
				}
				if err := c.Start(); err != nil {
					t.Fatal(err)
				}
				cmds[p], stdins[p], copied[p] = c, in, make(chan struct{})
				// Each worker says it is connected before the run starts, so
				// that a slow start (the race detector, a loaded machine)
				// shortens no process's share of the run.
				line, err := bufio.NewReader(io.TeeReader(out, &outs[p])).ReadString('\n')
				go func() { _, _ = io.Copy(&outs[p], out); close(copied[p]) }()
				if line != fleetReady+"\n" {
					<-copied[p]
					t.Fatalf("worker process %d did not start (%v):\n%s%s", p, err, outs[p].String(), errs[p].String())
				}
			}
			// Every process runs until one moment, fleetSlack past the
			// window that is counted, so that every reservation booked in
			// the window is waited for, however late its goroutine wakes.
			stop := time.Now().Add(dur + fleetSlack)
			for p := range cmds {
				if _, err := fmt.Fprintln(stdins[p], stop.UnixNano()); err != nil {
					t.Fatal(err)
				}
			}
			for p, c := range cmds {
				<-copied[p]
				if err := c.Wait(); err != nil {
					t.Fatalf("worker process %d: %v\n%s%s", p, err, outs[p].String(), errs[p].String())
				}
			}
			var booked []int64 // act_at of every reservation, µs on Redis' clock
			var late []time.Duration
			for p := range cmds {
				b, err := os.ReadFile(filepath.Join(dir, strconv.Itoa(p)))
				if err != nil {
					t.Fatal(err)
				}
				for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
					var at, lateNs int64
					if _, err := fmt.Sscan(line, &at, &lateNs); err != nil {
						t.Fatalf("worker %d wrote %q: %v", p, line, err)
					}
					booked, late = append(booked, at), append(late, time.Duration(lateNs))
				}
			}
			slices.Sort(booked)
			start := booked[0]
			end := start + dur.Microseconds()
			n := 0
			for _, at := range booked {
				if at < end {
					n++
				}
			}
			want := float64(fleetRate)*dur.Seconds() + fleetBurst
			t.Logf("%d processes: %d calls booked in the first %v (want %.0f ± 1%%); %d in all", procs, n, dur, want, len(booked))
			if float64(n) < want*0.99 || float64(n) > want*1.01 {
				t.Errorf("%d calls in %v, want %.0f ± 1%%", n, dur, want)
			}
			most := 0
			for i, j := 0, 0; i < len(booked); i++ {
				for booked[i]-booked[j] >= 1_000_000 {
					j++
				}
				most = max(most, i-j+1)
			}
			if most > fleetRate+fleetBurst {
				t.Errorf("%d calls in one second, want at most %d", most, fleetRate+fleetBurst)
			}
			slices.Sort(late)
			t.Logf("busiest second: %d calls; wake-up after the booked moment: p50 %v, p99 %v, max %v", most, late[len(late)/2], late[len(late)*99/100], late[len(late)-1])
		})
	}
}

const (
	fleetEnv              = "SLUICE_TEST_FLEET_WORKER" // addrs;algorithm;limit name;output file
	fleetReady            = "fleet worker ready"
	fleetRate, fleetBurst = 100, 10
	fleetWorkers          = 32
	fleetSlack            = 500 * time.Millisecond
)

// fleetWorker is one process of TestWaitFleet: it connects, says
// fleetReady, reads the moment to stop at (Unix ns) from stdin, and then
// fleetWorkers goroutines call WaitN until that moment; it writes every
// reservation's booked moment and how late its goroutine woke, a line each.
func fleetWorker(t *testing.T) {
	f := strings.Split(os.Getenv(fleetEnv), ";")
	if len(f) != 4 {
		t.Fatalf("%s=%q: want addrs;algorithm;name;file", fleetEnv, os.Getenv(fleetEnv))
	}
	lim := Must(GCRA(fleetRate, time.Second, fleetBurst))
	if Algorithm(f[1]) == AlgTokenBucket {
		lim = Must(TokenBucket(fleetRate, time.Second, fleetBurst))
	}
	lim = lim.Named(f[2])
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: strings.Split(f[0], ","), DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := New(c, quiet...)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	fmt.Println(fleetReady)
	line, err := bufio.NewReader(os.Stdin).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the moment to stop at: %v", err)
	}
	stopNs, err := strconv.ParseInt(strings.TrimSpace(line), 10, 64)
	if err != nil {
		t.Fatalf("the moment to stop at: %v", err)
	}
	var mu sync.Mutex
	var out strings.Builder
	// Cancelled, not a deadline: a deadline would refuse the reservations
	// that conform after it, which the run should go on making until then.
	ctx, cancel := context.WithCancel(context.Background())
	defer time.AfterFunc(time.Until(time.Unix(0, stopNs)), cancel).Stop()
	var wg sync.WaitGroup
	for range fleetWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				r, err := l.WaitN(ctx, "upstream", lim, 1)
				if err != nil {
					if ctx.Err() == nil {
						t.Error(err)
					}
					return
				}
				woke := time.Now()
				mu.Lock()
				fmt.Fprintf(&out, "%d %d\n", r.actAt, woke.Sub(r.at).Nanoseconds())
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if err := os.WriteFile(f[3], []byte(out.String()), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestWaitDegraded: while Redis cannot answer, the failure policy decides
// a Wait, and the Reservation says so: FailOpen goes at once, FailClosed
// reserves nothing (ErrNotReserved), FailLocal waits on this replica's
// share — its burst at once, then a local reservation that Cancel gives
// back.
func TestWaitDegraded(t *testing.T) {
	lim := Must(GCRA(2, time.Hour, 2))
	ctx := context.Background()
	for _, tc := range []struct {
		policy FailurePolicy
		ok     []bool // three Reserves with a minute's wait
	}{
		{FailOpen, []bool{true, true, true}},
		{FailClosed, []bool{false, false, false}},
		{FailLocal, []bool{true, true, false}}, // the burst of 2; the third would wait 30 min
	} {
		t.Run(tc.policy.String(), func(t *testing.T) {
			l, _, _, sc := miniLimiter(t, WithFailurePolicy(tc.policy))
			sc.fail.Store(true)
			for i, want := range tc.ok {
				r, err := l.Reserve(ctx, "w", lim, time.Minute)
				if err != nil {
					t.Fatal(err)
				}
				if r.OK != want || !r.Degraded {
					t.Fatalf("reserve %d: OK %v Degraded %v, want OK %v, degraded", i, r.OK, r.Degraded, want)
				}
			}
			wctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			_, err := l.Wait(wctx, "w", lim)
			if tc.policy == FailOpen && err != nil || tc.policy != FailOpen && !errors.Is(err, ErrNotReserved) {
				t.Fatalf("Wait: %v", err)
			}
			if tc.policy == FailLocal {
				r, err := l.Reserve(ctx, "w", lim, time.Hour)
				if err != nil || !r.OK || r.Delay() != 30*time.Minute {
					t.Fatalf("local reservation: %+v, %v (delay %v, want 30m)", r, err, r.Delay())
				}
				if err := r.Cancel(ctx); err != nil {
					t.Fatal(err)
				}
				again, _ := l.Reserve(ctx, "w", lim, time.Hour)
				if again.Delay() != 30*time.Minute {
					t.Fatalf("after the local cancel the next waits %v, want 30m", again.Delay())
				}
			}
		})
	}
}

// BenchmarkWaitNoWait sets Wait beside Allow on a redis-server when
// nothing needs to wait: the overhead of a reservation over an admission
// (go test -run '^$' -bench WaitNoWait .).
func BenchmarkWaitNoWait(b *testing.B) {
	s := redisserver.Start(b)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{s.Addr}, DisableCache: true})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	l, err := New(c, quiet...)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	lim := Must(GCRA(1<<30, time.Second, 1<<30))
	ctx := context.Background()
	b.Run("allow", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if r, err := l.Allow(ctx, "bench", lim); err != nil || !r.Allowed {
				b.Fatal(r, err)
			}
		}
	})
	b.Run("wait", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := l.Wait(ctx, "bench", lim); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestReserveAll: requests and tokens per second of one upstream, reserved
// together: the reservation conforms when both admit, both book their cost
// at that moment, a reservation one limit cannot make in time books neither,
// and Cancel gives back both.
func TestReserveAll(t *testing.T) {
	l, _, _, _ := miniLimiter(t, WithDenialCache(0))
	ctx := context.Background()
	requests := Must(GCRA(2, time.Second, 2)).Named("requests") // T = 500ms
	tokens := Must(GCRA(1000, time.Second, 1000)).Named("tokens")
	call := func(n int64, maxWait time.Duration) *Reservation {
		t.Helper()
		r, err := l.ReserveAll(ctx, "llm", []Booking{{Limit: requests, Cost: 1}, {Limit: tokens, Cost: n}}, maxWait)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	tokensLeft := func() int64 {
		t.Helper()
		r, err := l.AllowN(ctx, "llm", tokens, 0)
		if err != nil {
			t.Fatal(err)
		}
		return r.Remaining
	}
	if r := call(600, 0); !r.OK || r.Delay() != 0 {
		t.Fatalf("first: %+v", r)
	}
	// 400 tokens left: 600 more conform in 200ms; the request limit
	// admits at once (its burst): the common moment is 200ms.
	r := call(600, time.Second)
	if !r.OK || r.Delay() != 200*time.Millisecond {
		t.Fatalf("second: OK %v delay %v, want 200ms", r.OK, r.Delay())
	}
	// A third would need 600 more tokens, 800ms away: not made when the
	// caller waits 100ms, and nothing is booked on either limit.
	before := tokensLeft()
	if third := call(600, 100*time.Millisecond); third.OK || tokensLeft() != before {
		t.Fatalf("a reservation one limit cannot make in time booked something: %+v, tokens %d → %d", third, before, tokensLeft())
	}
	if err := r.Cancel(ctx); err != nil {
		t.Fatal(err)
	}
	if got := tokensLeft(); got != 400 {
		t.Fatalf("after the cancel %d tokens left, want the 400 of before the second", got)
	}
	if again := call(600, time.Second); !again.OK || again.Delay() != 200*time.Millisecond {
		t.Fatalf("after the cancel: OK %v delay %v, want 200ms again", again.OK, again.Delay())
	}
	if _, err := l.ReserveAll(ctx, "llm", []Booking{{Limit: requests, Cost: 1}, {Limit: requests, Cost: 2}}, 0); !errors.Is(err, ErrInvalidLimit) {
		t.Fatalf("one limit twice: %v", err)
	}
	if _, err := l.ReserveAll(ctx, "llm", []Booking{{Limit: Must(TokenBucket(2, time.Second, 2)), Cost: 1}}, 0); !errors.Is(err, ErrInvalidLimit) {
		t.Fatalf("a token bucket: %v", err)
	}
	if _, err := l.ReserveAll(ctx, "llm", []Booking{{Limit: requests, Cost: 0}}, 0); !errors.Is(err, ErrInvalidCost) {
		t.Fatalf("cost 0: %v", err)
	}
}
