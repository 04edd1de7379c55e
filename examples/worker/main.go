// Command worker shows a fleet sharing one outbound quota: several
// processes, each running several goroutines, call a (fake) third-party
// API that allows a fixed rate to all of them together. Every call first
// waits its turn with sluice's Limiter.Wait, so the fleet keeps to the
// rate exactly without any coordination but the Redis they share.
//
//	go run ./examples/worker                          # 3 processes × 8 workers, 20 calls/s, on an embedded Redis
//	go run ./examples/worker -procs 4 -workers 32 -rate 100 -burst 10 -duration 10s
//	go run ./examples/worker -redis 127.0.0.1:6380    # a real Redis (a cluster: several addresses)
//
// The first process starts the embedded Redis (miniredis) and the fake
// upstream, runs the others as copies of itself, and prints what the
// upstream saw: the calls per second and the busiest second against the
// limit's rate + burst.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice"
)

type config struct {
	procs, workers int
	rate, burst    int64
	duration       time.Duration
	algorithm      string
	redis          string
	upstream       string // set in the worker processes
	name           string // the limit's name, the same in every process
}

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(2)
	}
}

func parse(args []string) (config, error) {
	var c config
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.IntVar(&c.procs, "procs", 3, "worker processes")
	fs.IntVar(&c.workers, "workers", 8, "goroutines per process")
	fs.Int64Var(&c.rate, "rate", 20, "calls per second the upstream allows to the whole fleet")
	fs.Int64Var(&c.burst, "burst", 5, "calls the upstream allows at once")
	fs.DurationVar(&c.duration, "duration", 5*time.Second, "how long the fleet runs")
	fs.StringVar(&c.algorithm, "algorithm", "gcra", "the limit's algorithm: gcra or token_bucket")
	fs.StringVar(&c.redis, "redis", "", "Redis address (several, comma-separated: a cluster); empty: an embedded miniredis")
	fs.StringVar(&c.upstream, "upstream", "", "(worker processes) the fake upstream's URL")
	fs.StringVar(&c.name, "name", "", "(worker processes) the limit's name")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	switch {
	case c.procs < 1 || c.procs > 64:
		return c, fmt.Errorf("-procs %d: want 1 to 64", c.procs)
	case c.workers < 1 || c.workers > 1024:
		return c, fmt.Errorf("-workers %d: want 1 to 1024", c.workers)
	case c.duration <= 0:
		return c, fmt.Errorf("-duration %v: want a positive duration", c.duration)
	case c.algorithm != "gcra" && c.algorithm != "token_bucket":
		return c, fmt.Errorf("-algorithm %q: want gcra or token_bucket", c.algorithm)
	}
	if _, err := c.limit(); err != nil {
		return c, err
	}
	return c, nil
}

// limit is the upstream's quota, as every process builds it.
func (c config) limit() (sluice.Limit, error) {
	build := sluice.GCRA
	if c.algorithm == "token_bucket" {
		build = sluice.TokenBucket
	}
	lim, err := build(c.rate, time.Second, c.burst)
	if err != nil {
		return lim, fmt.Errorf("-rate %d -burst %d: %w", c.rate, c.burst, err)
	}
	if c.name != "" {
		lim = lim.Named(c.name)
	}
	return lim, nil
}

func run(args []string, out io.Writer) error {
	c, err := parse(args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if c.upstream != "" {
		return work(c)
	}
	_, err = lead(c, out)
	return err
}

// lead starts the Redis (unless -redis names one) and the fake upstream,
// runs the worker processes and reports what the upstream saw.
func lead(c config, out io.Writer) (summary, error) {
	if c.redis == "" {
		m, err := miniredis.Run() // on the real clock: the Limiters use its TIME
		if err != nil {
			return summary{}, err
		}
		defer m.Close()
		c.redis = m.Addr()
	}
	up, err := startUpstream()
	if err != nil {
		return summary{}, err
	}
	defer up.close()
	exe, err := os.Executable()
	if err != nil {
		return summary{}, err
	}
	c.name = fmt.Sprintf("upstream-%d", time.Now().UnixNano()) // a fresh quota for this run
	fmt.Fprintf(out, "%d processes × %d workers share %d calls/s (bursts of %d, %s) for %v, on Redis at %s\n",
		c.procs, c.workers, c.rate, c.burst, c.algorithm, c.duration, c.redis)
	cmds := make([]*exec.Cmd, c.procs)
	for i := range cmds {
		cmd := exec.Command(exe, "-upstream", up.url, "-name", c.name, "-redis", c.redis,
			"-workers", strconv.Itoa(c.workers), "-rate", strconv.FormatInt(c.rate, 10), "-burst", strconv.FormatInt(c.burst, 10),
			"-duration", c.duration.String(), "-algorithm", c.algorithm, "-procs", "1")
		cmd.Env = append(os.Environ(), "SLUICE_WORKER_PROCESS="+strconv.Itoa(i))
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Start(); err != nil {
			return summary{}, err
		}
		cmds[i] = cmd
	}
	var failed error
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil && failed == nil {
			failed = fmt.Errorf("worker process %d: %w", i, err)
		}
	}
	if failed != nil {
		return summary{}, failed
	}
	return report(out, c, up.arrivals()), nil
}

// summary is what the upstream saw.
type summary struct {
	calls   int
	span    time.Duration  // from the first call to the last
	perProc map[string]int // calls per worker process
	busiest int            // the most calls in any 1-second window
}

// report prints the calls the upstream received: per process, per second,
// and the busiest second against rate + burst.
func report(out io.Writer, c config, calls []arrival) summary {
	if len(calls) == 0 {
		fmt.Fprintln(out, "the upstream received no calls")
		return summary{}
	}
	slices.SortFunc(calls, func(a, b arrival) int { return a.at.Compare(b.at) })
	start := calls[0].at
	s := summary{calls: len(calls), span: calls[len(calls)-1].at.Sub(start), perProc: map[string]int{}}
	var perSecond []int
	for _, a := range calls {
		s.perProc[a.from]++
		i := int(a.at.Sub(start) / time.Second)
		for len(perSecond) <= i {
			perSecond = append(perSecond, 0)
		}
		perSecond[i]++
	}
	for i, j := 0, 0; i < len(calls); i++ {
		for calls[i].at.Sub(calls[j].at) >= time.Second {
			j++
		}
		s.busiest = max(s.busiest, i-j+1)
	}
	fmt.Fprintf(out, "the upstream received %d calls in %.2fs: %.1f/s after the burst (the limit: %d/s)\n",
		s.calls, s.span.Seconds(), float64(s.calls-int(c.burst))/max(s.span.Seconds(), 1e-9), c.rate)
	procs := make([]string, 0, len(s.perProc))
	for p := range s.perProc {
		procs = append(procs, p)
	}
	slices.Sort(procs)
	for _, p := range procs {
		fmt.Fprintf(out, "  process %s: %d calls\n", p, s.perProc[p])
	}
	fmt.Fprintf(out, "calls per second: %v\n", perSecond)
	fmt.Fprintf(out, "busiest second: %d calls (rate + burst: %d)\n", s.busiest, c.rate+c.burst)
	return s
}

type arrival struct {
	at   time.Time
	from string
}

// upstream is the fake third party: it records when each call arrived
// and from which process.
type upstream struct {
	url   string
	srv   *http.Server
	mu    sync.Mutex
	calls []arrival
}

func startUpstream() (*upstream, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	u := &upstream{url: "http://" + ln.Addr().String() + "/call"}
	u.srv = &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := time.Now()
		u.mu.Lock()
		u.calls = append(u.calls, arrival{now, r.Header.Get("X-Worker-Process")})
		u.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})}
	go func() { _ = u.srv.Serve(ln) }() // ErrServerClosed once close is called
	return u, nil
}

func (u *upstream) arrivals() []arrival {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.calls)
}

func (u *upstream) close() { u.srv.Close() }

// work is one worker process: c.workers goroutines, each waiting its turn
// on the shared limit before every call to the upstream, for c.duration.
func work(c config) error {
	lim, err := c.limit()
	if err != nil {
		return err
	}
	opt := rueidis.ClientOption{InitAddress: strings.Split(c.redis, ","), DisableCache: true}
	if len(opt.InitAddress) == 1 {
		opt.ForceSingleClient = true // miniredis or a standalone Redis
	}
	client, err := rueidis.NewClient(opt)
	if err != nil {
		return fmt.Errorf("cannot connect to Redis at %s: %w", c.redis, err)
	}
	defer client.Close()
	limiter, err := sluice.New(client)
	if err != nil {
		return err
	}
	defer limiter.Close()

	// Stop by cancelling, not by a deadline: WaitN refuses a turn that
	// comes after its context's deadline, and the run should go on taking
	// turns until it ends.
	ctx, cancel := context.WithCancel(context.Background())
	defer time.AfterFunc(c.duration, cancel).Stop()
	proc := os.Getenv("SLUICE_WORKER_PROCESS")
	httpc := &http.Client{Timeout: 10 * time.Second}
	errs := make(chan error, c.workers)
	var wg sync.WaitGroup
	for range c.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				if _, err := limiter.Wait(ctx, "upstream-api", lim); err != nil {
					if ctx.Err() == nil {
						errs <- err
					}
					return
				}
				req, _ := http.NewRequest(http.MethodPost, c.upstream, nil)
				req.Header.Set("X-Worker-Process", proc)
				resp, err := httpc.Do(req)
				if err != nil {
					errs <- err
					return
				}
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs // nil when there was none
}
