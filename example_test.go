package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice"
)

// exampleLimiter returns a Limiter on an embedded miniredis whose clock is
// pinned, so the examples print the same thing on every run. Programs use
// a real Redis: rueidis.NewClient(rueidis.ClientOption{InitAddress:
// []string{"127.0.0.1:6379"}}) and sluice.New(client).
func exampleLimiter() (*sluice.Limiter, func(time.Duration), func()) {
	m, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	m.SetTime(time.Unix(1_700_000_000, 0))
	m.ClockTTL(true)
	client, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress: []string{m.Addr()}, DisableCache: true, ForceSingleClient: true,
	})
	if err != nil {
		panic(err)
	}
	now := time.Unix(1_700_000_000, 0)
	// A pinned clock, and a timeout no loaded machine reaches, so the
	// output never depends on where the example runs.
	lim, err := sluice.New(client, sluice.WithClock(func() time.Time { return now }), sluice.WithTimeout(time.Minute))
	if err != nil {
		panic(err)
	}
	advance := func(d time.Duration) {
		now = now.Add(d)
		m.SetTime(now)
	}
	return lim, advance, func() { client.Close(); m.Close() }
}

func ExampleGCRA() {
	limiter, advance, done := exampleLimiter()
	defer done()
	ctx := context.Background()

	// 10 requests per second, at most 3 at once.
	limit := sluice.Must(sluice.GCRA(10, time.Second, 3))
	for i := 0; i < 4; i++ {
		r, _ := limiter.Allow(ctx, "user-42", limit)
		fmt.Printf("allowed=%v remaining=%d retry_after=%v\n", r.Allowed, r.Remaining, r.RetryAfter)
	}
	advance(100 * time.Millisecond) // one emission interval later
	r, _ := limiter.Allow(ctx, "user-42", limit)
	fmt.Printf("after 100ms: allowed=%v remaining=%d\n", r.Allowed, r.Remaining)
	// Output:
	// allowed=true remaining=2 retry_after=0s
	// allowed=true remaining=1 retry_after=0s
	// allowed=true remaining=0 retry_after=0s
	// allowed=false remaining=0 retry_after=100ms
	// after 100ms: allowed=true remaining=0
}

func ExampleTokenBucket() {
	limiter, advance, done := exampleLimiter()
	defer done()
	ctx := context.Background()

	// A bucket of 5 tokens refilled at 1 per second; a request may cost several.
	limit := sluice.Must(sluice.TokenBucket(1, time.Second, 5))
	r, _ := limiter.AllowN(ctx, "upload:alice", limit, 4)
	fmt.Printf("cost 4: allowed=%v remaining=%d\n", r.Allowed, r.Remaining)
	r, _ = limiter.AllowN(ctx, "upload:alice", limit, 3)
	fmt.Printf("cost 3: allowed=%v retry_after=%v\n", r.Allowed, r.RetryAfter)
	r, _ = limiter.AllowN(ctx, "upload:alice", limit, 6)
	fmt.Printf("cost 6: allowed=%v never=%v\n", r.Allowed, r.RetryAfter == sluice.RetryNever)
	advance(2 * time.Second)
	r, _ = limiter.AllowN(ctx, "upload:alice", limit, 3)
	fmt.Printf("2s later, cost 3: allowed=%v remaining=%d\n", r.Allowed, r.Remaining)
	// Output:
	// cost 4: allowed=true remaining=1
	// cost 3: allowed=false retry_after=2s
	// cost 6: allowed=false never=true
	// 2s later, cost 3: allowed=true remaining=0
}

func ExampleFixedWindow() {
	limiter, advance, done := exampleLimiter()
	defer done()
	ctx := context.Background()

	// 2 requests per minute, in windows aligned to the clock's minutes.
	limit := sluice.Must(sluice.FixedWindow(2, time.Minute))
	for i := 0; i < 3; i++ {
		r, _ := limiter.Allow(ctx, "10.0.0.7", limit)
		fmt.Printf("allowed=%v remaining=%d retry_after=%v\n", r.Allowed, r.Remaining, r.RetryAfter)
	}
	advance(40 * time.Second) // the clock was 20s into a minute: the next window starts
	r, _ := limiter.Allow(ctx, "10.0.0.7", limit)
	fmt.Printf("next window: allowed=%v remaining=%d\n", r.Allowed, r.Remaining)
	// Output:
	// allowed=true remaining=1 retry_after=0s
	// allowed=true remaining=0 retry_after=0s
	// allowed=false remaining=0 retry_after=40s
	// next window: allowed=true remaining=1
}

func ExampleSlidingLog() {
	limiter, advance, done := exampleLimiter()
	defer done()
	ctx := context.Background()

	// Exactly 2 requests in any 10 seconds.
	limit := sluice.Must(sluice.SlidingLog(2, 10*time.Second))
	limiter.Allow(ctx, "key-1", limit)
	advance(4 * time.Second)
	limiter.Allow(ctx, "key-1", limit)
	r, _ := limiter.Allow(ctx, "key-1", limit)
	fmt.Printf("allowed=%v retry_after=%v\n", r.Allowed, r.RetryAfter)
	advance(6 * time.Second) // the first request leaves the window
	r, _ = limiter.Allow(ctx, "key-1", limit)
	fmt.Printf("allowed=%v remaining=%d\n", r.Allowed, r.Remaining)
	// Output:
	// allowed=false retry_after=6s
	// allowed=true remaining=0
}

func ExampleSlidingWindow() {
	limiter, advance, done := exampleLimiter()
	defer done()
	ctx := context.Background()

	// About 10 per minute: the previous minute's count, weighted by how
	// much of it still overlaps the last 60 seconds, counts too.
	limit := sluice.Must(sluice.SlidingWindow(10, time.Minute))
	r, _ := limiter.AllowN(ctx, "tenant-9", limit, 10)
	fmt.Printf("cost 10: allowed=%v remaining=%d\n", r.Allowed, r.Remaining)
	// The clock was 20s into a minute; 70s later it is 30s into the next
	// one, so half of the full minute still overlaps the sliding window.
	advance(70 * time.Second)
	r, _ = limiter.AllowN(ctx, "tenant-9", limit, 0) // cost 0 reports, charging nothing
	fmt.Printf("70s later: remaining=%d\n", r.Remaining)
	// Output:
	// cost 10: allowed=true remaining=0
	// 70s later: remaining=5
}

func ExampleConcurrency() {
	limiter, _, done := exampleLimiter()
	defer done()
	ctx := context.Background()

	// At most 2 reports rendering at once; a crashed holder's slot comes
	// back after 30 seconds.
	limit := sluice.Must(sluice.Concurrency(2, 30*time.Second))
	a, r1, _ := limiter.Acquire(ctx, "reports", limit)
	_, r2, _ := limiter.Acquire(ctx, "reports", limit)
	_, r3, _ := limiter.Acquire(ctx, "reports", limit)
	fmt.Println(r1.Allowed, r2.Allowed, r3.Allowed)
	limiter.Release(ctx, a)
	_, r4, _ := limiter.Acquire(ctx, "reports", limit)
	fmt.Println("after release:", r4.Allowed)
	// Output:
	// true true false
	// after release: true
}

func ExampleLimiter_AllowAll() {
	limiter, _, done := exampleLimiter()
	defer done()
	ctx := context.Background()

	// 3 per second AND 5 per hour, charged together or not at all.
	perSecond := sluice.Must(sluice.GCRA(3, time.Second, 3)).Named("per-second")
	perHour := sluice.Must(sluice.GCRA(5, time.Hour, 5)).Named("per-hour")
	for i := 0; i < 4; i++ {
		r, _ := limiter.AllowAll(ctx, "user-7", []sluice.Limit{perSecond, perHour}, 1)
		fmt.Printf("allowed=%v remaining=%d binding=%s\n", r.Allowed, r.Remaining, r.Limit.Name)
	}
	// Output:
	// allowed=true remaining=2 binding=per-second
	// allowed=true remaining=1 binding=per-second
	// allowed=true remaining=0 binding=per-second
	// allowed=false remaining=0 binding=per-second
}

func ExampleOpenClient() {
	// Nothing listens on 127.0.0.1:1: the Redis is down at start-up.
	client, err := sluice.OpenClient(sluice.ClientOption("127.0.0.1:1"))
	unreachable := errors.Is(err, sluice.ErrUnreachable)
	if err != nil && !unreachable {
		panic(err)
	}
	defer client.Close()
	limiter, err := sluice.New(client)
	if err != nil {
		panic(err)
	}
	defer limiter.Close()
	r, _ := limiter.Allow(context.Background(), "user-1", sluice.Must(sluice.GCRA(10, time.Minute, 10)))
	fmt.Println("unreachable:", unreachable, "allowed:", r.Allowed, "by the failure policy:", r.Degraded)
	// Output:
	// unreachable: true allowed: true by the failure policy: true
}

func ExampleDecision_Binding() {
	limiter, _, done := exampleLimiter()
	defer done()
	ctx := context.Background()

	// The same two limits as one batch: each one's own Result from the
	// same script (what a RateLimit header per limit needs), and the
	// binding one, as AllowAll reports it.
	perSecond := sluice.Must(sluice.GCRA(3, time.Second, 3)).Named("per-second")
	perHour := sluice.Must(sluice.GCRA(5, time.Hour, 5)).Named("per-hour")
	var d sluice.Decision
	for i := 0; i < 4; i++ {
		_ = limiter.DecideInto(ctx, &d,
			sluice.Check{Identity: "user-8", Limit: perSecond, Cost: 1},
			sluice.Check{Identity: "user-8", Limit: perHour, Cost: 1})
		fmt.Printf("allowed=%v binding=%s", d.Allowed, d.Binding().Limit.Name)
		for _, each := range d.Results {
			fmt.Printf(" %s: remaining=%d allowed=%v", each.Limit.Name, each.Remaining, each.Allowed)
		}
		fmt.Println()
	}
	// Output:
	// allowed=true binding=per-second per-second: remaining=2 allowed=true per-hour: remaining=4 allowed=true
	// allowed=true binding=per-second per-second: remaining=1 allowed=true per-hour: remaining=3 allowed=true
	// allowed=true binding=per-second per-second: remaining=0 allowed=true per-hour: remaining=2 allowed=true
	// allowed=false binding=per-second per-second: remaining=0 allowed=false per-hour: remaining=2 allowed=true
}

func ExampleLimiter_Decide() {
	limiter, _, done := exampleLimiter()
	defer done()
	ctx := context.Background()

	// One request, three quotas on three identities, one round trip: the
	// client's IP, its API key, and the route everyone shares.
	perIP := sluice.Must(sluice.GCRA(100, time.Minute, 10))
	perKey := sluice.Must(sluice.SlidingWindow(1000, time.Hour))
	route := sluice.Must(sluice.FixedWindow(2, time.Minute)).Named("search")
	request := func() {
		d, err := limiter.Decide(ctx,
			sluice.Check{Identity: "ip:192.0.2.7", Limit: perIP, Cost: 1},
			sluice.Check{Identity: "key:k-1", Limit: perKey, Cost: 1},
			sluice.Check{Identity: "GET /search", Limit: route, Cost: 1},
		)
		if err != nil {
			panic(err)
		}
		fmt.Printf("allowed=%v ip=%d key=%d route=%d\n", d.Allowed,
			d.Results[0].Remaining, d.Results[1].Remaining, d.Results[2].Remaining)
	}
	request()
	request()
	request() // the route's 2 are spent: denied, and the others' charges given back
	// Output:
	// allowed=true ip=9 key=999 route=1
	// allowed=true ip=8 key=998 route=0
	// allowed=false ip=8 key=998 route=0
}

func ExampleLimiter_Reserve() {
	limiter, advance, done := exampleLimiter()
	defer done()
	ctx := context.Background()

	// A third party allows 2 calls per second, bursts of 2, to all of our
	// workers together: each books its call and waits its turn.
	upstream := sluice.Must(sluice.GCRA(2, time.Second, 2))
	for i := 0; i < 4; i++ {
		r, err := limiter.Reserve(ctx, "payments-api", upstream, time.Minute)
		if err != nil {
			panic(err)
		}
		fmt.Printf("call %d: reserved=%v, may go in %v\n", i, r.OK, r.Delay())
	}
	// One that would not wait more than 100ms is not booked (nothing charged).
	r, _ := limiter.Reserve(ctx, "payments-api", upstream, 100*time.Millisecond)
	fmt.Printf("impatient: reserved=%v, would wait %v\n", r.OK, r.Delay())

	advance(time.Second)
	late, _ := limiter.Reserve(ctx, "payments-api", upstream, time.Minute)
	fmt.Printf("a second later: may go in %v\n", late.Delay())
	_ = late.Cancel(ctx) // not needed after all: its slot comes back
	again, _ := limiter.Reserve(ctx, "payments-api", upstream, time.Minute)
	fmt.Printf("after the cancel: may go in %v\n", again.Delay())
	// Output:
	// call 0: reserved=true, may go in 0s
	// call 1: reserved=true, may go in 0s
	// call 2: reserved=true, may go in 500ms
	// call 3: reserved=true, may go in 1s
	// impatient: reserved=false, would wait 1.5s
	// a second later: may go in 500ms
	// after the cancel: may go in 500ms
}

func ExampleLimiter_Wait() {
	limiter, _, done := exampleLimiter()
	defer done()

	// Wait blocks until the call conforms, or returns at once when it
	// cannot before the context's deadline (and charges nothing).
	upstream := sluice.Must(sluice.GCRA(1, time.Hour, 1))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := limiter.Wait(ctx, "mail-relay", upstream); err == nil {
		fmt.Println("first call: at once")
	}
	_, err := limiter.Wait(ctx, "mail-relay", upstream)
	fmt.Println("second call:", errors.Is(err, sluice.ErrNotReserved), errors.Is(err, context.DeadlineExceeded))
	// Output:
	// first call: at once
	// second call: true true
}

func ExampleLimiter_Wait_workers() {
	// A fleet of workers calls a third party that allows 20 calls per
	// second, bursts of 5, to all of them together. Here they are 8
	// goroutines on one Limiter; in production they are processes on as
	// many machines, sharing nothing but the Redis.
	m, err := miniredis.Run() // a real clock: the Limiter uses Redis TIME
	if err != nil {
		panic(err)
	}
	defer m.Close()
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{m.Addr()}, DisableCache: true, ForceSingleClient: true})
	if err != nil {
		panic(err)
	}
	defer client.Close()
	limiter, err := sluice.New(client)
	if err != nil {
		panic(err)
	}
	defer limiter.Close()

	upstream := sluice.Must(sluice.GCRA(20, time.Second, 5))
	callUpstream := func() {} // the third party's API
	var calls atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 4; i++ {
				if _, err := limiter.Wait(context.Background(), "upstream-api", upstream); err != nil {
					panic(err)
				}
				callUpstream()
				calls.Add(1)
			}
		}()
	}
	wg.Wait()
	// 32 calls at 20/s after a burst of 5: the last one no sooner than
	// (32-5)/20 s after the first.
	fmt.Println(calls.Load(), "calls; the last after at least 1.35s:", time.Since(start) >= 1350*time.Millisecond)
	// Output:
	// 32 calls; the last after at least 1.35s: true
}

func ExampleLimiter_Peek() {
	limiter, _, done := exampleLimiter()
	defer done()
	ctx := context.Background()

	limit := sluice.Must(sluice.FixedWindow(10, time.Hour)).Named("exports")
	limiter.AllowN(ctx, "acme", limit, 9)
	// Peek answers "would one more request pass?" as Allow would, and
	// charges nothing; AllowN with cost 0 reports the quota left.
	p, _ := limiter.Peek(ctx, "acme", limit)
	q, _ := limiter.AllowN(ctx, "acme", limit, 0)
	fmt.Println("peek:", p.Allowed, "remaining after it:", p.Remaining, "quota left:", q.Remaining)
	limiter.Allow(ctx, "acme", limit)
	p, _ = limiter.Peek(ctx, "acme", limit)
	fmt.Println("spent:", p.Allowed, "retry after:", p.RetryAfter)
	limiter.Reset(ctx, "acme", limit)
	q, _ = limiter.AllowN(ctx, "acme", limit, 0)
	fmt.Println("after Reset:", q.Remaining)
	fmt.Println(limiter.Key("acme", limit))
	fmt.Println(limiter.Key("{evil}\n", limit)[:16] + "…")
	// Output:
	// peek: true remaining after it: 0 quota left: 1
	// spent: false retry after: 46m40s
	// after Reset: 10
	// sluice:{acme}:exports
	// sluice:{~56a004d…
}

func ExampleWithFailurePolicy() {
	m, _ := miniredis.Run()
	client, _ := rueidis.NewClient(rueidis.ClientOption{
		InitAddress: []string{m.Addr()}, DisableCache: true, ForceSingleClient: true,
	})
	defer client.Close()
	closed, _ := sluice.New(client, sluice.WithFailurePolicy(sluice.FailClosed), sluice.WithLogger(nil))
	open, _ := sluice.New(client, sluice.WithFailurePolicy(sluice.FailOpen), sluice.WithLogger(nil))
	local, _ := sluice.New(client, sluice.WithReplicas(4), sluice.WithLogger(nil)) // FailLocal is the default, with 1 replica

	m.Close() // Redis goes away
	ctx := context.Background()
	limit := sluice.Must(sluice.GCRA(8, time.Second, 8))
	r, _ := closed.Allow(ctx, "u", limit)
	fmt.Println("fail-closed:", r.Allowed, r.Degraded)
	r, _ = open.Allow(ctx, "u", limit)
	fmt.Println("fail-open:", r.Allowed, r.Degraded)
	allowed := 0
	for i := 0; i < 5; i++ {
		if r, _ := local.Allow(ctx, "u", limit); r.Allowed {
			allowed++
		}
	}
	fmt.Println("local fallback, 1 of 4 replicas:", allowed, "of 5 allowed")
	// Output:
	// fail-closed: false true
	// fail-open: true true
	// local fallback, 1 of 4 replicas: 2 of 5 allowed
}

// ClientOption gives the recommended rueidis options; set what the
// deployment needs on top (here ForceSingleClient, which miniredis needs;
// TLS, credentials or Sentinel in production).
func ExampleClientOption() {
	m, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer m.Close()
	opt := sluice.ClientOption(m.Addr())
	opt.ForceSingleClient = true
	client, err := rueidis.NewClient(opt)
	if err != nil {
		panic(err)
	}
	defer client.Close()
	limiter, err := sluice.New(client, sluice.WithTimeout(time.Minute))
	if err != nil {
		panic(err)
	}
	perUser := sluice.Must(sluice.GCRA(2, time.Minute, 2))
	for range 3 {
		res, err := limiter.Allow(context.Background(), "user-1", perUser)
		if err != nil {
			panic(err)
		}
		fmt.Println(res.Allowed, opt.MaxFlushDelay)
	}
	// Output:
	// true 20µs
	// true 20µs
	// false 20µs
}
