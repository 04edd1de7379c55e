package reload_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adapters/httplimit"
	"github.com/sluice-go/sluice/reload"
)

// Example keeps an HTTP middleware's policy in force from a file: each
// version written to it is applied between requests, and a bad one is
// refused while the last good one serves. (The file here is a small JSON
// of its own; a policy file loader takes its place in a program.)
func Example() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{mr.Addr()}, DisableCache: true, ForceSingleClient: true})
	if err != nil {
		panic(err)
	}
	defer client.Close()
	limiter, err := sluice.New(client, sluice.WithTimeout(time.Minute))
	if err != nil {
		panic(err)
	}
	defer limiter.Close()

	dir, err := os.MkdirTemp("", "example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "limits.json")
	// write replaces the file whole (a temporary file renamed over it),
	// as a deployment should: the watcher never sees half a file.
	write := func(text string) {
		if err := os.WriteFile(path+".tmp", []byte(text), 0o644); err != nil {
			panic(err)
		}
		if err := os.Rename(path+".tmp", path); err != nil {
			panic(err)
		}
	}

	// load turns the file into a Config, named by the file's Digest, as
	// Status names the version.
	load := func(path string) (httplimit.Config, error) {
		data, err := os.ReadFile(path)
		if err != nil {
			return httplimit.Config{}, err
		}
		var f struct{ PerMinute int64 }
		if err := json.Unmarshal(data, &f); err != nil {
			return httplimit.Config{}, fmt.Errorf("%s: %w", path, err)
		}
		l, err := sluice.FixedWindow(f.PerMinute, time.Minute)
		if err != nil {
			return httplimit.Config{}, fmt.Errorf("%s: %w", path, err)
		}
		return httplimit.Config{Limiter: limiter, Version: reload.Digest(data),
			Policies: []httplimit.Policy{{Name: "per-ip", Limit: l, Key: httplimit.RemoteIP()}}}, nil
	}

	write(`{"PerMinute": 100}`)
	cfg, err := load(path)
	if err != nil {
		panic(err)
	}
	mw, err := httplimit.New(cfg)
	if err != nil {
		panic(err)
	}
	w, err := reload.Watch(context.Background(), path, load, mw.Update,
		reload.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	defer w.Close()

	h := mw.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	get := func() string {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		return rec.Header().Get("RateLimit-Policy")
	}
	fmt.Println(mw.Version(), get())

	// The watcher sees the change; Reload applies it at once (call it on
	// SIGHUP too: see Example_sighup).
	write(`{"PerMinute": 5}`)
	if err := w.Reload(); err != nil {
		panic(err)
	}
	fmt.Println(mw.Version(), get())

	write(`{"PerMinute": 0}`)
	err = w.Reload()
	fmt.Println("refused:", strings.ReplaceAll(err.Error(), dir, "DIR"))
	s := w.Status()
	fmt.Println(s.Version == mw.Version(), get(), s.Successes, "versions applied, last error:", s.LastError != nil)
	// Output:
	// sha256:2c2338d945dd0693 "per-ip";q=100;w=60
	// sha256:38e8fa5231ab3ce2 "per-ip";q=5;w=60
	// refused: DIR/limits.json: sluice: invalid limit: fixed_window: rate must be at least 1, got 0
	// true "per-ip";q=5;w=60 2 versions applied, last error: true
}

// Example_sighup reloads on SIGHUP, as well as on every change the
// watcher sees, and reports a refused version.
func Example_sighup() {
	var w *reload.Watcher // from reload.Watch
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		for range hup {
			if err := w.Reload(); err != nil {
				slog.Error("policy file refused; the version in force keeps serving", "err", err)
			}
		}
	}()
}
