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
	store, err := overrides.New(client, overrides.Options{Logger: log})
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
	fl.stop = func() { signal.Stop(hup); close(done); w.Close() }
	return fl, nil
}
