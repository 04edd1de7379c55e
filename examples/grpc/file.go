package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/redis/rueidis"
	"google.golang.org/grpc"

	"github.com/sluice-go/sluice"
	grpclimit "github.com/sluice-go/sluice/adapters/grpc"
	"github.com/sluice-go/sluice/overrides"
	"github.com/sluice-go/sluice/policyfile"
	"github.com/sluice-go/sluice/reload"
)

// set reports whether the command line gave the flag name.
func set(fs *flag.FlagSet, name string) bool {
	found := false
	fs.Visit(func(f *flag.Flag) { found = found || f.Name == name })
	return found
}

// helloPolicy is the limit of the file's per-client policy on Hello, which
// the demo's client plays against.
func helloPolicy(path string) (policyfile.Limit, error) {
	c, err := policyfile.Load(path)
	if err != nil {
		return policyfile.Limit{}, err
	}
	for _, p := range c.Methods[methodHello] {
		if p.Name == "per-client" && p.Limit.Algorithm != policyfile.Concurrency {
			return p.Limit, nil
		}
	}
	return policyfile.Limit{}, errors.New(path + ": the demo's client needs a rate policy named per-client on " + methodHello)
}

// newFileServer is the gRPC server with the policy file's limits, watched
// until ctx ends or stop is called: a new version that loads is in force
// from the next call on; one that does not is logged to stderr and the
// last good one keeps serving. SIGHUP reloads too.
func newFileServer(ctx context.Context, cfg config, limiter *sluice.Limiter, client rueidis.Client, stderr io.Writer) (*grpc.Server, func(), error) {
	if err := registerDescriptor(); err != nil {
		return nil, nil, err
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	store, closeStore, err := overridesStore(cfg.redis, client, log)
	if err != nil {
		return nil, nil, err
	}
	var limits *grpclimit.Server
	apply := func(pc *policyfile.Config) error {
		gc, err := grpclimit.FromFile(pc, limiter)
		if err != nil {
			return err
		}
		gc.Overrides, gc.Version, gc.Logger = store, pc.Version, log
		if limits == nil {
			limits, err = grpclimit.New(gc)
			return err
		}
		return limits.Update(gc)
	}
	w, err := reload.Watch(ctx, cfg.configFile, policyfile.Load, apply, reload.Options{Logger: log})
	if err != nil {
		closeStore()
		return nil, nil, fmt.Errorf("%s: %w", cfg.configFile, err)
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-hup:
				_ = w.Reload() // a refusal is logged
			case <-done:
				return
			}
		}
	}()
	stop := func() { signal.Stop(hup); close(done); _ = w.Close(); closeStore() }
	return grpcServer(limits), stop, nil
}

// printFileLimits lists the policies of the policy file at path.
func printFileLimits(out io.Writer, path string) {
	c, err := policyfile.Load(path)
	if err != nil {
		return // the server has just loaded it; a change since is reported by the watcher
	}
	c.AllPolicies(func(where string, p *policyfile.Policy) {
		l := p.Limit
		what := fmt.Sprintf("%s %d per %v", l.Algorithm, l.Rate, l.Period)
		if l.Algorithm == policyfile.Concurrency {
			what = fmt.Sprintf("%d in flight", l.Rate)
		}
		fmt.Fprintf(out, "  %-40s %q: %s\n", where, p.Name, what)
	})
}

// overridesStore is the overrides of the Redis at addrs. On a real Redis
// it has a client of its own with client-side caching on (the Limiter's
// has it off: its every call is a script that writes), so that a call
// asks Redis nothing about overrides until one changes; on the embedded
// miniredis, which has no client tracking, it reads the Limiter's client
// and keeps a local copy refreshed at most once a second.
func overridesStore(addrs []string, client rueidis.Client, log *slog.Logger) (*overrides.Store, func(), error) {
	if len(addrs) == 0 {
		s, err := overrides.New(client, overrides.Options{Logger: log})
		return s, func() {}, err
	}
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs, ForceSingleClient: len(addrs) == 1})
	if err != nil {
		return nil, nil, fmt.Errorf("overrides: cannot connect to Redis at %v: %w", addrs, err)
	}
	s, err := overrides.New(c, overrides.Options{Logger: log})
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	return s, c.Close, nil
}
