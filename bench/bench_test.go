package bench_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	redisrate "github.com/go-redis/redis_rate/v10"
	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/throttled/throttled/v2"
	throttledredis "github.com/throttled/throttled/v2/store/goredisstore.v9"
	ulule "github.com/ulule/limiter/v3"
	ulredis "github.com/ulule/limiter/v3/drivers/store/redis"

	"github.com/sluice-go/sluice"
	server "github.com/sluice-go/sluice/internal/redisserver"
	goredistransport "github.com/sluice-go/sluice/transport/goredis"
)

// identities is the number of distinct identities of the "many" variants.
const identities = 4096

// goroutinesPerProc makes RunParallel use about 256 goroutines on any
// machine: SetParallelism multiplies it by GOMAXPROCS.
func goroutinesPerProc() int { return max(1, 256/runtime.GOMAXPROCS(0)) }

// decide is one rate-limit decision by one contender for one identity.
type decide func(ctx context.Context, id string) (allowed bool, err error)

// contender is one limiter under test.
type contender struct {
	name string
	fn   decide
}

// scenario is one limit configuration, expressed for each contender.
type scenario struct {
	name       string // admit or deny
	contenders []contender
}

// env is the shared server and clients of one test binary run.
type env struct {
	srv      *server.Server
	rueidis  rueidis.Client // DisableCache, default flush
	rueidisD rueidis.Client // sluice.ClientOption: DisableCache, MaxFlushDelay 20µs
	goredis  *goredis.Client
	sluice   *sluice.Limiter // defaults
	sluiceD  *sluice.Limiter // defaults, on rueidisD (the recommended client)
	sluiceNC *sluice.Limiter // WithDenialCache(0)
	// goredisT is the go-redis client of sluiceGR, sluice's defaults over
	// transport/goredis: its own client, with a pool for G=128 and more.
	goredisT *goredis.Client
	sluiceGR *sluice.Limiter
	// goredisA and sluiceGA: the same on a client whose AutoPipeliner
	// batches concurrent callers' commands (goredis.WithAutoPipeline).
	goredisA *goredis.Client
	sluiceGA *sluice.Limiter
	// variants are Limiters with defaults on clients with other rueidis
	// options, by name: the measurements behind the recommended client.
	variants map[string]*sluice.Limiter
	extra    []rueidis.Client
	rate     *redisrate.Limiter
	ulStore  ulule.Store
	thStore  *throttledredis.GoRedisStore
}

var (
	shared     *env
	sharedErr  error
	sharedOnce sync.Once
)

// TestMain stops the shared server, if a benchmark started one.
func TestMain(m *testing.M) {
	code := m.Run()
	if shared != nil {
		shared.close()
	}
	os.Exit(code)
}

// sharedEnv returns the one server and set of clients every benchmark of
// this run uses, starting them on first use.
func sharedEnv(b *testing.B) *env {
	b.Helper()
	sharedOnce.Do(func() {
		srv, err := server.New()
		if err != nil {
			sharedErr = err
			return
		}
		shared, sharedErr = newEnv(srv)
		if sharedErr != nil {
			srv.Stop()
		}
	})
	if sharedErr != nil {
		server.Unavailable(b, sharedErr)
	}
	return shared
}

// testEnv starts a server and clients for one test.
func testEnv(t *testing.T) *env {
	t.Helper()
	srv := server.Start(t)
	// Tests compare decisions: a timeout no loaded machine reaches keeps
	// the failure policy out of them. Benchmarks keep the defaults.
	e, err := newEnv(srv, sluice.WithTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.close() })
	return e
}

func newEnv(srv *server.Server, opts ...sluice.Option) (*env, error) {
	e := &env{srv: srv}
	var err error
	if e.rueidis, err = rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true}); err != nil {
		return nil, err
	}
	if e.rueidisD, err = rueidis.NewClient(sluice.ClientOption(srv.Addr)); err != nil {
		return nil, err
	}
	if e.sluice, err = sluice.New(e.rueidis, opts...); err != nil {
		return nil, err
	}
	if e.sluiceD, err = sluice.New(e.rueidisD, opts...); err != nil {
		return nil, err
	}
	if e.sluiceNC, err = sluice.New(e.rueidis, sluice.WithDenialCache(0)); err != nil {
		return nil, err
	}
	e.variants = map[string]*sluice.Limiter{}
	for name, o := range clientVariants {
		o.InitAddress = []string{srv.Addr}
		c, err := rueidis.NewClient(o)
		if err != nil {
			return nil, err
		}
		e.extra = append(e.extra, c)
		if e.variants[name], err = sluice.New(c, opts...); err != nil {
			return nil, err
		}
	}
	// The go-redis pool holds a connection per call in flight (no
	// pipelining across callers): 256 for up to 256 concurrent callers,
	// where go-redis' default is 10 per GOMAXPROCS.
	e.goredisT = goredis.NewClient(&goredis.Options{Addr: srv.Addr, PoolSize: 256})
	tr, err := goredistransport.Transport(e.goredisT)
	if err != nil {
		return nil, err
	}
	if e.sluiceGR, err = sluice.NewFromTransport(tr, opts...); err != nil {
		return nil, err
	}
	e.goredisA = goredis.NewClient(&goredis.Options{Addr: srv.Addr, PoolSize: 256})
	if tr, err = goredistransport.Transport(e.goredisA, goredistransport.WithAutoPipeline()); err != nil {
		return nil, err
	}
	if e.sluiceGA, err = sluice.NewFromTransport(tr, opts...); err != nil {
		return nil, err
	}
	e.goredis = goredis.NewClient(&goredis.Options{Addr: srv.Addr})
	e.rate = redisrate.NewLimiter(e.goredis)
	if e.ulStore, err = ulredis.NewStoreWithOptions(e.goredis, ulule.StoreOptions{Prefix: "ulule", MaxRetry: ulule.DefaultMaxRetry}); err != nil {
		return nil, err
	}
	if e.thStore, err = throttledredis.NewCtx(e.goredis, "throttled:"); err != nil {
		return nil, err
	}
	return e, nil
}

func (e *env) close() {
	e.sluiceGR.Close() // before its client: no call left in flight
	_ = e.goredisT.Close()
	e.sluiceGA.Close()
	_ = e.goredisA.Close()
	e.rueidis.Close()
	e.rueidisD.Close()
	for _, c := range e.extra {
		c.Close()
	}
	_ = e.goredis.Close()
	e.srv.Stop()
}

// clientVariants are other rueidis options the report compares for
// sluice, each beside the plain client (DisableCache only) and
// sluice.ClientOption: the measurements behind the recommended options.
var clientVariants = map[string]rueidis.ClientOption{
	"flush10us": {DisableCache: true, MaxFlushDelay: 10 * time.Microsecond},
	"flush50us": {DisableCache: true, MaxFlushDelay: 50 * time.Microsecond},
	"conn1":     {DisableCache: true, PipelineMultiplex: -1},
	"conn4":     {DisableCache: true, PipelineMultiplex: 2},
	"always":    {DisableCache: true, AlwaysPipelining: true},
	"pool":      {DisableCache: true, DisableAutoPipelining: true},
	"buf64k":    {DisableCache: true, WriteBufferEachConn: 64 << 10, ReadBufferEachConn: 64 << 10},
}

// sluiceOne decides one limit with a sluice Limiter. A degraded decision
// (Redis not asked) is an error here: it would measure the failure policy.
func sluiceOne(l *sluice.Limiter, lim sluice.Limit) decide {
	return func(ctx context.Context, id string) (bool, error) {
		r, err := l.Allow(ctx, id, lim)
		if err == nil && r.Degraded {
			err = fmt.Errorf("%w for %q", errDegraded, id)
		}
		return r.Allowed, err
	}
}

// sluiceAll decides several limits at once with AllowAll.
func sluiceAll(l *sluice.Limiter, lims ...sluice.Limit) decide {
	return func(ctx context.Context, id string) (bool, error) {
		r, err := l.AllowAll(ctx, id, lims, 1)
		if err == nil && r.Degraded {
			err = fmt.Errorf("%w for %q", errDegraded, id)
		}
		return r.Allowed, err
	}
}

// sluiceBatch decides lims on one identity with one Limiter.Decide: a
// check per limit, one script call each, sent in one pipelined write.
func sluiceBatch(l *sluice.Limiter, lims ...sluice.Limit) decide {
	return func(ctx context.Context, id string) (bool, error) {
		checks := make([]sluice.Check, len(lims))
		for i, lim := range lims {
			checks[i] = sluice.Check{Identity: id, Limit: lim, Cost: 1}
		}
		d, err := l.Decide(ctx, checks...)
		if err == nil {
			for _, r := range d.Results {
				if r.Degraded {
					return false, fmt.Errorf("%w for %q", errDegraded, id)
				}
			}
		}
		return d.Allowed, err
	}
}

// redisRate decides with redis_rate under its own key prefix (one per
// limit configuration, as sluice keys carry the limit name). With several
// limits it calls them one after the other, stopping at the first denial,
// as a redis_rate user must (the earlier limits stay charged when a later
// one denies).
func redisRate(l *redisrate.Limiter, prefix string, lims ...redisrate.Limit) decide {
	return func(ctx context.Context, id string) (bool, error) {
		for i, lim := range lims {
			k := prefix + ":" + id
			if len(lims) > 1 {
				k += ":" + strconv.Itoa(i)
			}
			r, err := l.Allow(ctx, k, lim)
			if err != nil {
				return false, err
			}
			if r.Allowed == 0 {
				return false, nil
			}
		}
		return true, nil
	}
}

// ululeFixed decides with ulule/limiter's fixed window on its go-redis store.
func ululeFixed(store ulule.Store, prefix string, rate ulule.Rate) decide {
	l := ulule.New(store, rate)
	return func(ctx context.Context, id string) (bool, error) {
		c, err := l.Get(ctx, prefix+":"+id)
		return !c.Reached, err
	}
}

// sluiceEach decides several limits with one Allow each, one after the
// other, stopping at the first denial: what a caller without AllowAll
// would write.
func sluiceEach(l *sluice.Limiter, lims ...sluice.Limit) decide {
	return func(ctx context.Context, id string) (bool, error) {
		for _, lim := range lims {
			r, err := l.Allow(ctx, id, lim)
			if err != nil {
				return false, err
			}
			if r.Degraded {
				return false, fmt.Errorf("%w for %q", errDegraded, id)
			}
			if !r.Allowed {
				return false, nil
			}
		}
		return true, nil
	}
}

// sluiceLease takes and gives back one slot of a concurrency limit: one
// decision, two round trips.
func sluiceLease(l *sluice.Limiter, lim sluice.Limit) decide {
	return func(ctx context.Context, id string) (bool, error) {
		lease, r, err := l.Acquire(ctx, id, lim)
		if err != nil {
			return false, err
		}
		if r.Degraded {
			return false, fmt.Errorf("%w for %q", errDegraded, id)
		}
		if !r.Allowed {
			return false, nil
		}
		return true, l.Release(ctx, lease)
	}
}

// throttledGCRA decides with throttled's GCRA on its go-redis v9 store:
// a pipelined TIME+GET, then a compare-and-swap script (EVAL, retried on
// a lost race).
func throttledGCRA(store throttled.GCRAStoreCtx, prefix string, q throttled.RateQuota) decide {
	l, err := throttled.NewGCRARateLimiterCtx(store, q)
	if err != nil {
		panic(err) // a quota the benchmarks got wrong
	}
	return func(ctx context.Context, id string) (bool, error) {
		limited, _, err := l.RateLimitCtx(ctx, prefix+":"+id, 1)
		return !limited, err
	}
}

// The limits. "admit": so generous that every request is admitted (the
// cost of a decision that writes). "deny": 10 per hour per identity, so
// after priming every request is denied (the cost of a decision that
// only reads).
var (
	gcraAdmit = sluice.Must(sluice.GCRA(1_000_000_000, time.Second, 1_000_000_000))
	gcraDeny  = sluice.Must(sluice.GCRA(10, time.Hour, 10))
	rateAdmit = redisrate.Limit{Rate: 1_000_000_000, Period: time.Second, Burst: 1_000_000_000}
	rateDeny  = redisrate.Limit{Rate: 10, Period: time.Hour, Burst: 10}

	fixedAdmit = sluice.Must(sluice.FixedWindow(1_000_000_000, time.Second))
	fixedDeny  = sluice.Must(sluice.FixedWindow(10, time.Hour))
	ululeAdmit = ulule.Rate{Period: time.Second, Limit: 1_000_000_000}
	ululeDeny  = ulule.Rate{Period: time.Hour, Limit: 10}
	// throttled's MaxBurst counts the requests past the first.
	throttledDeny = throttled.RateQuota{MaxRate: throttled.PerHour(10), MaxBurst: 9}

	// Two limits per identity: a short one and a long one.
	multiAdmit      = []sluice.Limit{gcraAdmit, sluice.Must(sluice.GCRA(1_000_000_000, time.Minute, 1_000_000_000))}
	multiDeny       = []sluice.Limit{gcraDeny, sluice.Must(sluice.GCRA(100, 24*time.Hour, 100))}
	multiRateAdmit  = []redisrate.Limit{rateAdmit, {Rate: 1_000_000_000, Period: time.Minute, Burst: 1_000_000_000}}
	multiRateDeny   = []redisrate.Limit{rateDeny, {Rate: 100, Period: 24 * time.Hour, Burst: 100}}
	denyBurst       = 10
	admitBurstCheck = 40
)

// gcraScenarios: sluice GCRA against redis_rate (GCRA).
func gcraScenarios(e *env) []scenario {
	return []scenario{
		{"admit", []contender{
			{"sluice", sluiceOne(e.sluice, gcraAdmit)},
			{"sluice_recommended", sluiceOne(e.sluiceD, gcraAdmit)},
			{"sluice_goredis", sluiceOne(e.sluiceGR, gcraAdmit)},
			{"redis_rate", redisRate(e.rate, "gcra-admit", rateAdmit)},
		}},
		{"deny", []contender{
			{"sluice", sluiceOne(e.sluice, gcraDeny)},
			{"sluice_recommended", sluiceOne(e.sluiceD, gcraDeny)},
			{"sluice_goredis", sluiceOne(e.sluiceGR, gcraDeny)},
			{"redis_rate", redisRate(e.rate, "gcra-deny", rateDeny)},
			{"throttled", throttledGCRA(e.thStore, "gcra-deny", throttledDeny)},
		}},
	}
}

// fixedScenarios: sluice fixed window against ulule/limiter (fixed window).
func fixedScenarios(e *env) []scenario {
	return []scenario{
		{"admit", []contender{
			{"sluice", sluiceOne(e.sluice, fixedAdmit)},
			{"sluice_recommended", sluiceOne(e.sluiceD, fixedAdmit)},
			{"ulule", ululeFixed(e.ulStore, "fixed-admit", ululeAdmit)},
		}},
		{"deny", []contender{
			{"sluice", sluiceOne(e.sluice, fixedDeny)},
			{"sluice_recommended", sluiceOne(e.sluiceD, fixedDeny)},
			{"ulule", ululeFixed(e.ulStore, "fixed-deny", ululeDeny)},
		}},
	}
}

// multiScenarios: sluice AllowAll with two GCRA limits against two
// redis_rate calls.
func multiScenarios(e *env) []scenario {
	return []scenario{
		{"admit", []contender{
			{"sluice", sluiceAll(e.sluice, multiAdmit...)},
			{"sluice_recommended", sluiceAll(e.sluiceD, multiAdmit...)},
			{"redis_rate", redisRate(e.rate, "multi-admit", multiRateAdmit...)},
		}},
		{"deny", []contender{
			{"sluice", sluiceAll(e.sluice, multiDeny...)},
			{"sluice_recommended", sluiceAll(e.sluiceD, multiDeny...)},
			{"redis_rate", redisRate(e.rate, "multi-deny", multiRateDeny...)},
		}},
	}
}

// ids are the identities of the "many" variants; hot is the one identity
// of the "hot" variants.
var (
	ids = func() []string {
		s := make([]string, identities)
		for i := range s {
			s[i] = "user-" + strconv.Itoa(i)
		}
		return s
	}()
	hot = []string{"hot"}
)

// prime drives every identity of a deny scenario to its first denial, so
// the timed loop sees the steady state (every request denied) from its
// first iteration. Sluice contenders share state, so priming twice is
// harmless.
func prime(b testing.TB, fn decide, keys []string) {
	b.Helper()
	ctx := context.Background()
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	next := atomic.Int64{}
	for g := 0; g < 32; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(keys) {
					return
				}
				for n := 0; ; n++ {
					ok, err := fn(ctx, keys[i])
					if errors.Is(err, errDegraded) && n < 500 {
						time.Sleep(10 * time.Millisecond) // Redis too slow, or the breaker open: ask again
						continue
					}
					if err != nil {
						failed.CompareAndSwap(nil, &err)
						return
					}
					if !ok {
						break
					}
					if n > 1500 {
						err := fmt.Errorf("identity %q never denied", keys[i])
						failed.CompareAndSwap(nil, &err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		b.Fatalf("priming: %v", *err)
	}
}

// run benchmarks every scenario × contender, serial and parallel, over
// many identities and over one hot identity.
func run(b *testing.B, scenarios func(*env) []scenario) {
	e := sharedEnv(b)
	sc := scenarios(e)
	for _, mode := range []string{"serial", "parallel"} {
		b.Run(mode, func(b *testing.B) {
			for _, s := range sc {
				b.Run(s.name, func(b *testing.B) {
					for _, keys := range []struct {
						name string
						ids  []string
					}{{"many", ids}, {"hot", hot}} {
						b.Run(keys.name, func(b *testing.B) {
							for _, c := range s.contenders {
								if mode == "serial" && c.name == "sluice_recommended" {
									continue // a flush delay only adds latency to lone calls
								}
								b.Run(c.name, func(b *testing.B) {
									if s.name == "deny" {
										prime(b, c.fn, keys.ids)
									}
									if mode == "serial" {
										serial(b, c.fn, keys.ids)
									} else {
										parallel(b, c.fn, keys.ids)
									}
								})
							}
						})
					}
				})
			}
		})
	}
}

// serial measures latency: one goroutine, one decision after another.
func serial(b *testing.B, fn decide, keys []string) {
	ctx := context.Background()
	admitted := 0
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ok, err := fn(ctx, keys[i%len(keys)])
		if err != nil {
			b.Fatal(err)
		}
		if ok {
			admitted++
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(admitted)/float64(b.N), "admitted/op")
}

// parallel measures throughput: about 256 goroutines deciding at once.
func parallel(b *testing.B, fn decide, keys []string) {
	ctx := context.Background()
	var admitted, failures, degraded atomic.Int64
	var firstErr atomic.Value
	b.SetParallelism(goroutinesPerProc())
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := rand.IntN(len(keys))
		var ok int64
		for pb.Next() {
			allowed, err := fn(ctx, keys[i%len(keys)])
			i++
			if errors.Is(err, errDegraded) {
				degraded.Add(1) // Redis too slow for the Limiter's timeout: the failure policy answered
				continue
			}
			if err != nil {
				failures.Add(1)
				firstErr.CompareAndSwap(nil, err)
				continue
			}
			if allowed {
				ok++
			}
		}
		admitted.Add(ok)
	})
	b.StopTimer()
	if n := failures.Load(); n > 0 {
		b.Fatalf("%d of %d decisions failed; first: %v", n, b.N, firstErr.Load())
	}
	b.ReportMetric(float64(admitted.Load())/float64(b.N), "admitted/op")
	b.ReportMetric(float64(degraded.Load())/float64(b.N), "degraded/op")
}

// BenchmarkGCRA compares sluice's GCRA with go-redis/redis_rate (GCRA).
func BenchmarkGCRA(b *testing.B) { run(b, gcraScenarios) }

// BenchmarkFixedWindow compares sluice's fixed window with ulule/limiter's.
func BenchmarkFixedWindow(b *testing.B) { run(b, fixedScenarios) }

// BenchmarkAllowAll compares sluice's AllowAll over two GCRA limits (one
// script) with two redis_rate calls per decision.
func BenchmarkAllowAll(b *testing.B) { run(b, multiScenarios) }
