package reload

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	"go.opentelemetry.io/otel/metric"
)

// DefaultDebounce is Options.Debounce's default.
const DefaultDebounce = 100 * time.Millisecond

// maxTries is how many times in a row a reload reads the file again when
// it changed while it was being loaded.
const maxTries = 3

// Options configures a Watcher. The zero value is usable.
type Options struct {
	// Debounce is how long after the first change of a burst the file is
	// read (default DefaultDebounce), so that the several events of one
	// replacement, or an editor's truncate then write, make one reload of
	// the whole file. Events during the wait do not postpone it: a file
	// rewritten without pause is still read once per Debounce.
	Debounce time.Duration
	// Logger receives each version applied (Info), each version refused
	// (Error, with the error) and watch errors (Warn); default
	// slog.Default().
	Logger *slog.Logger
	// MeterProvider, when set, records MetricSuccesses, MetricFailures and
	// MetricVersion.
	MeterProvider metric.MeterProvider
}

// Status is what a Watcher has done: the version in force, and the
// failures since.
type Status struct {
	// Path is the file watched (absolute).
	Path string
	// Version is the Digest of the version in force.
	Version string
	// LoadedAt is when the version in force was applied.
	LoadedAt time.Time
	// Successes counts the versions applied, the first one included.
	Successes int64
	// Failures counts the versions refused: the file could not be read,
	// loaded or applied.
	Failures int64
	// LastError is why the last version was refused, or nil when the
	// file holds the version in force (a later version was applied, or
	// the file was put back).
	LastError error
	// LastErrorAt is when LastError happened.
	LastErrorAt time.Time
}

// Watcher watches one file, or one directory (WatchDir), and applies each
// new version of it. Its methods are safe for concurrent use.
type Watcher struct {
	path   string                 // absolute, clean
	dir    string                 // the directory watched: the file's, or the directory itself
	isDir  bool                   // WatchDir: path is the directory
	read   func() ([]byte, error) // what a version is made of: the file's bytes, or the directory's snapshot
	load   func() (apply func() error, err error)
	opts   Options
	log    *slog.Logger
	fsw    *fsnotify.Watcher
	met    *metrics
	hooks  hooks
	cancel context.CancelFunc
	done   chan struct{} // closed when run has returned and the watch is closed
	closed error         // the watch's Close error, once done

	mu      sync.Mutex // one reload at a time; guards what follows
	status  Status
	refused string // what the last refused version's file held: its Digest, or its read error
	linkDir string // the directory the file lies in through a link, watched too ("" when dir)
	stopped bool   // the watch is closed: follow adds nothing
	real    atomic.Pointer[string]
}

// hooks let the package's tests drive the debounce and see each reload.
type hooks struct {
	newTimer func() timer             // nil: a time.Timer
	seen     func(ev fsnotify.Event)  // after each event the loop handled
	reloaded func(s Status, did bool) // after each reload the loop makes: its Status, and whether it loaded anything
}

// timer is the debounce's timer.
type timer interface {
	C() <-chan time.Time
	Reset(d time.Duration)
}

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time   { return r.t.C }
func (r realTimer) Reset(d time.Duration) { r.t.Reset(d) }

// Watch loads path with load, hands the result to apply, and returns a
// Watcher that does the same again each time path changes, until ctx ends
// or Close is called. It returns an error, and watches nothing, when the
// first version cannot be read, loaded or applied.
//
// load reads the file at the path it is given (path made absolute), as a
// policy file loader does; apply puts the result in force
// (Middleware.Update) and returns an error to refuse it. They are called
// from one goroutine at a time. A version is applied only when the file
// held the same bytes before and after load read it, so a version caught
// half written is read again, not applied.
func Watch[T any](ctx context.Context, path string, load func(path string) (T, error), apply func(T) error, opts Options) (*Watcher, error) {
	if load == nil || apply == nil {
		return nil, errors.New("reload: Watch needs a load and an apply func")
	}
	return start(ctx, path, func(p string) (func() error, error) {
		v, err := load(p)
		if err != nil {
			return nil, err
		}
		return func() error { return apply(v) }, nil
	}, opts, hooks{})
}

// WatchDir is Watch for a configuration made of the files of a directory
// (a Kubernetes ConfigMap volume, say): load reads the directory (at the
// absolute path it is given) and apply puts the result in force, first at
// once and then each time the directory changes. Its version is the
// content of the files of dir whose names match accepts (regular files or
// links to them, in name order, names included; subdirectories are not
// read): a file added, changed, renamed or removed is a new version, and
// a change that leaves those files as they were (an editor's swap file)
// applies nothing. Status.Path is the directory.
//
// The directory itself is watched, so a file linked in from elsewhere is
// seen again when its link changes (as a ConfigMap volume swaps its ..data
// link), not when the file it leads to is edited in place; Reload reads
// it at any time.
func WatchDir[T any](ctx context.Context, dir string, match func(name string) bool, load func(dir string) (T, error), apply func(T) error, opts Options) (*Watcher, error) {
	if load == nil || apply == nil || match == nil {
		return nil, errors.New("reload: WatchDir needs a match, a load and an apply func")
	}
	return startDir(ctx, dir, match, func(p string) (func() error, error) {
		v, err := load(p)
		if err != nil {
			return nil, err
		}
		return func() error { return apply(v) }, nil
	}, opts, hooks{})
}

// startDir is WatchDir without its type parameter.
func startDir(ctx context.Context, dir string, match func(string) bool, load func(string) (func() error, error), opts Options, h hooks) (*Watcher, error) {
	if dir == "" {
		return nil, errors.New("reload: WatchDir needs a directory")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("reload: %w", err)
	}
	if st, err := os.Stat(abs); err != nil {
		return nil, fmt.Errorf("reload: %w", err)
	} else if !st.IsDir() {
		return nil, fmt.Errorf("reload: WatchDir: %s is not a directory (Watch watches a file)", abs)
	}
	w := &Watcher{path: abs, dir: abs, isDir: true, read: func() ([]byte, error) { return snapshot(abs, match) }}
	return w.start(ctx, load, opts, h)
}

// snapshot is what a watched directory holds: the name, length and bytes
// of each file whose name match accepts, in name order.
func snapshot(dir string, match func(string) bool) ([]byte, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var b []byte
	for _, e := range entries {
		if !match(e.Name()) {
			continue
		}
		p := filepath.Join(dir, e.Name())
		if st, err := os.Stat(p); err != nil || st.IsDir() {
			continue // a dangling link, a directory
		}
		data, err := os.ReadFile(p)
		if errors.Is(err, os.ErrNotExist) {
			continue // removed meanwhile: the next event reads again
		}
		if err != nil {
			return nil, err
		}
		b = fmt.Appendf(b, "%s\x00%d\x00", e.Name(), len(data))
		b = append(b, data...)
	}
	return b, nil
}

// start is Watch without its type parameter.
func start(ctx context.Context, path string, load func(string) (func() error, error), opts Options, h hooks) (*Watcher, error) {
	if path == "" {
		return nil, errors.New("reload: Watch needs a file path")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("reload: %w", err)
	}
	w := &Watcher{path: abs, dir: filepath.Dir(abs), read: func() ([]byte, error) { return os.ReadFile(abs) }}
	return w.start(ctx, load, opts, h)
}

// start watches w.dir, loads w.path for the first time and starts the
// loop.
func (w *Watcher) start(ctx context.Context, load func(string) (func() error, error), opts Options, h hooks) (*Watcher, error) {
	if opts.Debounce < 0 {
		return nil, fmt.Errorf("reload: negative Options.Debounce %v", opts.Debounce)
	}
	if opts.Debounce == 0 {
		opts.Debounce = DefaultDebounce
	}
	abs := w.path
	w.opts, w.log, w.hooks, w.done = opts, opts.Logger, h, make(chan struct{})
	w.load = func() (func() error, error) { return load(abs) }
	var err error
	if w.log == nil {
		w.log = slog.Default()
	}
	w.status.Path = abs
	w.real.Store(new(string))
	if w.fsw, err = fsnotify.NewWatcher(); err != nil {
		return nil, fmt.Errorf("reload: watching %s: %w", abs, err)
	}
	// Watch before the first load, so that no change after it is missed.
	if err := w.fsw.Add(w.dir); err != nil {
		w.fsw.Close()
		return nil, fmt.Errorf("reload: watching directory %s: %w", w.dir, err)
	}
	if _, err := w.reload(true, false); err != nil {
		w.fsw.Close()
		return nil, fmt.Errorf("reload: first load of %s: %w", abs, err)
	}
	if w.met, err = newMetrics(opts.MeterProvider, w); err != nil {
		w.fsw.Close()
		return nil, err
	}
	ctx, w.cancel = context.WithCancel(ctx)
	go w.run(ctx)
	return w, nil
}

// Digest is the version a Watcher reports for a file holding data:
// "sha256:" and the first 16 hex digits of its SHA-256. A loader may name
// its configuration with it (httplimit's Config.Version), so that
// requests report the version Status reports.
func Digest(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:8])
}

// Reload reads the file now and applies it unless it holds the version in
// force; it returns why the new version was refused, or nil. Unlike a
// change seen on disk, it tries again a version already refused (an apply
// that failed for a reason since gone).
func (w *Watcher) Reload() error {
	_, err := w.reload(true, true)
	return err
}

// Status returns what w has done so far.
func (w *Watcher) Status() Status {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.status
}

// Close stops watching, as the end of Watch's context does, and waits
// until the watcher's own reloads have ended. Reload still works after
// Close.
func (w *Watcher) Close() error {
	w.cancel()
	<-w.done
	return w.closed
}

// run handles file system events until ctx ends: the first relevant event
// of a burst arms the debounce timer, which reloads when it fires. Then it
// closes the watch.
func (w *Watcher) run(ctx context.Context) {
	defer func() {
		w.mu.Lock()
		w.stopped = true
		w.mu.Unlock()
		w.closed = w.fsw.Close()
		w.met.unregister()
		close(w.done)
	}()
	var t timer
	if w.hooks.newTimer != nil {
		t = w.hooks.newTimer()
	} else {
		tt := time.NewTimer(time.Hour)
		tt.Stop()
		t = realTimer{tt}
		defer tt.Stop()
	}
	armed := false
	arm := func() {
		if !armed {
			armed = true
			t.Reset(w.opts.Debounce)
		}
	}
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-w.fsw.Events:
			if !ok {
				return
			}
			if w.relevant(ev) {
				arm()
			}
			if w.hooks.seen != nil {
				w.hooks.seen(ev)
			}
		case err, ok := <-w.fsw.Errors:
			if !ok {
				return
			}
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				arm() // events were lost: one may have been the file's
			}
			w.log.Warn("reload: watching "+w.path, "err", err)
		case <-t.C():
			armed = false
			did, _ := w.reload(false, true)
			if w.hooks.reloaded != nil {
				w.hooks.reloaded(w.Status(), did)
			}
		}
	}
}

// relevant reports whether ev may have changed what the file holds: an
// event on the file itself, on the file a link leads it to, or anything
// in its directories while the path leads to another file than the one
// last read (a link swapped, the file gone).
func (w *Watcher) relevant(ev fsnotify.Event) bool {
	name := filepath.Clean(ev.Name)
	real := *w.real.Load()
	if name == w.path || name == real {
		return true
	}
	if name == w.dir && ev.Has(fsnotify.Remove|fsnotify.Rename) {
		w.log.Warn("reload: the directory of "+w.path+" was removed: changes are no longer seen; Reload still reads the path", "dir", w.dir)
		return false
	}
	if w.isDir {
		return true // anything in it may change what it holds; the version tells
	}
	now, err := filepath.EvalSymlinks(w.path)
	return err != nil || now != real
}

// reload reads the file and, unless it holds the version in force (or,
// when !force, a version already refused), loads and applies it. It
// reports whether it loaded anything, and the error that refused it.
// watched is false for the first load, which logs and counts nothing in
// the metrics (Watch returns its error).
func (w *Watcher) reload(force, watched bool) (did bool, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	defer w.follow(watched)
	for range maxTries {
		data, err := w.read()
		if err != nil {
			return w.refuse(err.Error(), "", "read", err, force, watched)
		}
		version := Digest(data)
		if version == w.status.Version {
			w.status.LastError, w.refused = nil, ""
			return false, nil
		}
		if !force && version == w.refused {
			return false, w.status.LastError
		}
		apply, err := w.load()
		if !w.unchanged(version) {
			continue // changed while it was loaded: read it again
		}
		if err != nil {
			return w.refuse(version, version, "load", err, force, watched)
		}
		if err := apply(); err != nil {
			return w.refuse(version, version, "apply", err, force, watched)
		}
		prev := w.status.Version
		w.status.Version, w.status.LoadedAt = version, time.Now()
		w.status.Successes++
		w.status.LastError, w.refused = nil, ""
		if watched {
			w.met.success()
			w.log.Info("reload: new version applied", "path", w.path, "version", version, "previous", prev)
		}
		return true, nil
	}
	err = fmt.Errorf("reload: %s changed while it was being loaded, %d times in a row", w.path, maxTries)
	return w.refuse("", "", "read", err, true, watched)
}

// unchanged reports whether the file still holds version.
func (w *Watcher) unchanged(version string) bool {
	data, err := w.read()
	return err == nil && Digest(data) == version
}

// refuse records a version refused at stage (read, load, apply): what
// names it (key: its digest or read error) is not tried again until the
// file changes, unless force. Nothing is recorded for a refusal already
// recorded, unless force.
func (w *Watcher) refuse(key, version, stage string, err error, force, watched bool) (bool, error) {
	if !force && key != "" && key == w.refused {
		return false, w.status.LastError
	}
	w.refused = key
	w.status.Failures++
	w.status.LastError, w.status.LastErrorAt = err, time.Now()
	if watched {
		w.met.failure(stage)
		w.log.Error("reload: new version refused; the version in force keeps serving",
			"path", w.path, "stage", stage, "version", version, "in_force", w.status.Version, "err", err)
	}
	return true, err
}

// follow watches the directory the file lies in when a link leads out of
// its own, and remembers where the path leads.
func (w *Watcher) follow(watched bool) {
	if w.isDir {
		return // the directory itself is watched
	}
	real, err := filepath.EvalSymlinks(w.path)
	if err != nil {
		real = ""
	}
	w.real.Store(&real)
	linkDir := ""
	if real != "" && filepath.Dir(real) != w.dir {
		linkDir = filepath.Dir(real)
	}
	if linkDir == w.linkDir || w.stopped {
		return
	}
	if w.linkDir != "" {
		_ = w.fsw.Remove(w.linkDir) // gone with its directory, often
	}
	w.linkDir = ""
	if linkDir == "" {
		return
	}
	if err := w.fsw.Add(linkDir); err != nil {
		if watched {
			w.log.Warn("reload: cannot watch the directory "+w.path+" links to; changes to it are seen only when the link changes",
				"dir", linkDir, "err", err)
		}
		return
	}
	w.linkDir = linkDir
}
