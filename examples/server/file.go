package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adapters/httplimit"
	"github.com/sluice-go/sluice/internal/redisurl"
	"github.com/sluice-go/sluice/overrides"
	"github.com/sluice-go/sluice/policyfile"
	"github.com/sluice-go/sluice/reload"
)

// fileLimits is the rate limiting of -config: the policy file's
// policies, reloaded when the file changes or on SIGHUP, with the
// overrides kept in Redis.
type fileLimits struct {
	mw      *httplimit.Middleware
	watcher *reload.Watcher
	stop    func()
}

// limiterOptions returns the options of the file's limiter section, and
// fails when the command line set them too.
func limiterOptions(cfg config) ([]sluice.Option, *policyfile.Config, error) {
	pc, err := policyfile.Load(cfg.configFile)
	if err != nil {
		return nil, nil, err
	}
	if pc.Limiter != nil && cfg.limiterFlags {
		return nil, nil, fmt.Errorf("%s has a limiter section and the command line sets -failure, -replicas or -timeout: keep one", cfg.configFile)
	}
	return pc.LimiterOptions(), pc, nil
}

// startFileLimits builds the middleware from the policy file, and watches
// the file until ctx ends: a new version that loads is in force from the
// next request on, one that does not is logged to stderr and the last
// good one keeps serving.
func startFileLimits(ctx context.Context, cfg config, limiter *sluice.Limiter, client rueidis.Client, stderr io.Writer) (*fileLimits, error) {
	log := slog.New(slog.NewTextHandler(stderr, nil))
	store, closeStore, err := overridesStore(cfg.redis, client, log)
	if err != nil {
		return nil, err
	}
	fl := &fileLimits{}
	apply := func(pc *policyfile.Config) error {
		hc, err := httplimit.FromFile(pc, limiter)
		if err != nil {
			return err
		}
		hc.Overrides, hc.Version, hc.Logger = store, pc.Version, log
		if fl.mw == nil {
			fl.mw, err = httplimit.New(hc)
			return err
		}
		return fl.mw.Update(hc)
	}
	w, err := reload.Watch(ctx, cfg.configFile, policyfile.Load, apply, reload.Options{Logger: log})
	if err != nil {
		closeStore()
		return nil, err
	}
	fl.watcher = w
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-hup:
				w.Reload()
			case <-done:
				return
			}
		}
	}()
	fl.stop = func() { signal.Stop(hup); close(done); w.Close(); closeStore() }
	return fl, nil
}

// overridesStore is the overrides of the Redis -redis names. On a real
// Redis it has a client of its own with client-side caching on (the
// Limiter's has it off: its every call is a script that writes), so that a
// request asks Redis nothing about overrides until one changes; on the
// embedded miniredis, which has no client tracking, or a Redis that does
// not answer at start-up, it reads the Limiter's client and keeps a local
// copy refreshed at most once a second.
func overridesStore(redisFlag string, client rueidis.Client, log *slog.Logger) (*overrides.Store, func(), error) {
	if redisFlag == "" {
		s, err := overrides.New(client, overrides.Options{Logger: log})
		return s, func() {}, err
	}
	opt, err := redisurl.Parse(redisFlag)
	if err != nil {
		return nil, nil, err
	}
	c, err := rueidis.NewClient(opt)
	if err != nil {
		// Redis is down at start-up: the Limiter's client, which dials
		// again on later calls, serves the overrides from a local copy.
		log.Warn("overrides: Redis unreachable; overrides apply once it answers, refreshed every second", "err", err)
		s, err := overrides.New(client, overrides.Options{Logger: log, Cache: overrides.CacheLocal})
		return s, func() {}, err
	}
	s, err := overrides.New(c, overrides.Options{Logger: log})
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	return s, c.Close, nil
}
