package reload

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// waitLimit bounds every wait for the watcher: a wait that reaches it
// means the event never came, whatever the machine's load.
const waitLimit = time.Minute

// fakeTimer is a debounce timer the test fires.
type fakeTimer struct {
	c     chan time.Time
	armed chan time.Duration
}

func (f *fakeTimer) C() <-chan time.Time { return f.c }

func (f *fakeTimer) Reset(d time.Duration) { f.armed <- d }

// reloadResult is what one debounced reload did.
type reloadResult struct {
	status Status
	did    bool
}

// harness is a Watcher on a file of a test's own, whose debounce the test
// fires, with loads and applies recorded. The file's content is the
// version: content starting "bad" fails to load, "reject" fails to apply.
type harness struct {
	t       *testing.T
	dir     string
	path    string // the file watched
	w       *Watcher
	timer   *fakeTimer
	reloads chan reloadResult
	seen    chan fsnotify.Event
	barrier int
	loads   atomic.Int64
	log     *syncBuffer

	mu      sync.Mutex
	applied []string
}

// syncBuffer is a bytes.Buffer for a slog handler written from the
// watcher's goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// newHarness watches dir/name, which setup has created.
func newHarness(t *testing.T, setup func(dir string) (path string), opts Options) *harness {
	t.Helper()
	dir := t.TempDir()
	h := &harness{t: t, dir: dir, path: setup(dir), timer: &fakeTimer{c: make(chan time.Time), armed: make(chan time.Duration, 1024)},
		reloads: make(chan reloadResult, 1024), seen: make(chan fsnotify.Event, 1<<16), log: &syncBuffer{}}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(h.log, nil))
	}
	w, err := start(context.Background(), h.path, h.load, opts, hooks{
		newTimer: func() timer { return h.timer },
		reloaded: func(s Status, did bool) { h.reloads <- reloadResult{s, did} },
		seen:     func(ev fsnotify.Event) { h.seen <- ev },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := w.Close(); err != nil {
			t.Error(err)
		}
	})
	h.w = w
	return h
}

func (h *harness) load(path string) (func() error, error) {
	h.loads.Add(1)
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	v := string(data)
	if strings.HasPrefix(v, "bad") {
		return nil, errors.New("cannot parse " + strconv.Quote(v))
	}
	return func() error {
		if strings.HasPrefix(v, "reject") {
			return errors.New("refusing " + strconv.Quote(v))
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		h.applied = append(h.applied, v)
		return nil
	}, nil
}

func (h *harness) appliedVersions() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.applied...)
}

// writeFile writes content to path in place.
func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// replaceFile writes content to a temporary file and renames it over path.
func replaceFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	writeFile(t, tmp, content)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// quiesce waits until the watcher has handled every event made so far
// (it handles the events of one watch in order: a file created after
// them is seen after them), then fires a debounce they armed, so that the
// next change arms a fresh one. It returns how many times the debounce
// was armed meanwhile.
func (h *harness) quiesce() int {
	h.t.Helper()
	h.barrier++
	name := filepath.Join(h.dir, "barrier-"+strconv.Itoa(h.barrier))
	writeFile(h.t, name, "")
	deadline := time.After(waitLimit)
	for done := false; !done; {
		select {
		case ev := <-h.seen:
			done = filepath.Clean(ev.Name) == name
		case <-deadline:
			h.t.Fatalf("the watcher never saw %s", name)
		}
	}
	armed := 0
	for len(h.timer.armed) > 0 {
		<-h.timer.armed
		armed++
	}
	if armed > 0 {
		h.fire()
	}
	return armed
}

// fire fires the debounce and returns the reload it made.
func (h *harness) fire() reloadResult {
	h.t.Helper()
	select {
	case h.timer.c <- time.Time{}:
	case <-time.After(waitLimit):
		h.t.Fatal("the watcher never took the timer's tick")
	}
	select {
	case r := <-h.reloads:
		return r
	case <-time.After(waitLimit):
		h.t.Fatal("no reload after the timer fired")
	}
	return reloadResult{}
}

// change makes a change (after letting earlier events settle), waits for
// the debounce it arms, fires it and returns the reload.
func (h *harness) change(f func()) reloadResult {
	h.t.Helper()
	h.quiesce()
	f()
	select {
	case <-h.timer.armed:
	case <-time.After(waitLimit):
		h.t.Fatal("the change armed no reload: the watcher did not see it")
	}
	return h.fire()
}

func (h *harness) wantApplied(want ...string) {
	h.t.Helper()
	got := h.appliedVersions()
	if strings.Join(got, "|") != strings.Join(want, "|") {
		h.t.Fatalf("applied %q, want %q", got, want)
	}
}

// inDir creates dir/limits with content v1.
func inDir(t *testing.T) func(dir string) string {
	return func(dir string) string {
		p := filepath.Join(dir, "limits")
		writeFile(t, p, "v1")
		return p
	}
}

// TestWatchReplacements checks each way a file is replaced: each new
// version is loaded once and applied, and Status names it.
func TestWatchReplacements(t *testing.T) {
	t.Run("rename over", func(t *testing.T) {
		h := newHarness(t, inDir(t), Options{})
		r := h.change(func() { replaceFile(t, h.path, "v2") })
		if !r.did || r.status.Version != Digest([]byte("v2")) || r.status.Successes != 2 || r.status.LastError != nil {
			t.Fatalf("after a rename over the file: %+v", r)
		}
		h.wantApplied("v1", "v2")
	})
	t.Run("write in place", func(t *testing.T) {
		h := newHarness(t, inDir(t), Options{})
		r := h.change(func() { writeFile(t, h.path, "v2") })
		if !r.did || r.status.Version != Digest([]byte("v2")) {
			t.Fatalf("after writing in place: %+v", r)
		}
		h.wantApplied("v1", "v2")
	})
	t.Run("deleted then created", func(t *testing.T) {
		h := newHarness(t, inDir(t), Options{})
		r := h.change(func() {
			if err := os.Remove(h.path); err != nil {
				t.Fatal(err)
			}
		})
		if !errors.Is(r.status.LastError, fs.ErrNotExist) || r.status.Failures != 1 || r.status.Version != Digest([]byte("v1")) {
			t.Fatalf("after the file was deleted: %+v", r)
		}
		r = h.change(func() { writeFile(t, h.path, "v2") })
		if !r.did || r.status.Version != Digest([]byte("v2")) || r.status.LastError != nil || r.status.Failures != 1 {
			t.Fatalf("after the file was created again: %+v", r)
		}
		h.wantApplied("v1", "v2")
	})
	t.Run("symlink swap", func(t *testing.T) {
		// A Kubernetes ConfigMap volume: limits -> ..data/limits, and
		// ..data -> a directory of the version, swapped by renaming a new
		// link over ..data.
		h := newHarness(t, func(dir string) string {
			for _, v := range []string{"v1", "v2"} {
				if err := os.Mkdir(filepath.Join(dir, "..rev-"+v), 0o755); err != nil {
					t.Fatal(err)
				}
				writeFile(t, filepath.Join(dir, "..rev-"+v, "limits"), v)
			}
			if err := os.Symlink("..rev-v1", filepath.Join(dir, "..data")); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(filepath.Join("..data", "limits"), filepath.Join(dir, "limits")); err != nil {
				t.Fatal(err)
			}
			return filepath.Join(dir, "limits")
		}, Options{})
		r := h.change(func() {
			tmp := filepath.Join(h.dir, "..data_tmp")
			if err := os.Symlink("..rev-v2", tmp); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, filepath.Join(h.dir, "..data")); err != nil {
				t.Fatal(err)
			}
			if err := os.RemoveAll(filepath.Join(h.dir, "..rev-v1")); err != nil {
				t.Fatal(err)
			}
		})
		if !r.did || r.status.Version != Digest([]byte("v2")) {
			t.Fatalf("after the link swap: %+v", r)
		}
		// The file the link leads to, written in place: its directory is
		// watched too.
		r = h.change(func() { writeFile(t, filepath.Join(h.dir, "..rev-v2", "limits"), "v3") })
		if !r.did || r.status.Version != Digest([]byte("v3")) {
			t.Fatalf("after writing the linked file in place: %+v", r)
		}
		h.wantApplied("v1", "v2", "v3")
	})
}

// TestWatchKeepsBadVersionsOut checks that a version that fails to load
// or to apply is refused, logged with its error and counted (in Status and
// the metrics), that the version in force stays, that the same bytes are
// not tried again unless Reload asks, and that a good version then
// clears the error.
func TestWatchKeepsBadVersionsOut(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	h := newHarness(t, inDir(t), Options{MeterProvider: mp})

	r := h.change(func() { replaceFile(t, h.path, "bad one") })
	if r.status.Failures != 1 || r.status.Version != Digest([]byte("v1")) || r.status.LastError == nil ||
		!strings.Contains(r.status.LastError.Error(), `cannot parse "bad one"`) {
		t.Fatalf("after a bad file: %+v", r)
	}
	if log := h.log.String(); !strings.Contains(log, "level=ERROR") || !strings.Contains(log, `cannot parse \"bad one\"`) ||
		!strings.Contains(log, "stage=load") || !strings.Contains(log, "in_force="+Digest([]byte("v1"))) {
		t.Errorf("the refusal is not logged with its error:\n%s", log)
	}
	loads := h.loads.Load()
	r = h.change(func() { writeFile(t, h.path, "bad one") }) // the same bytes again
	if r.did || r.status.Failures != 1 || h.loads.Load() != loads {
		t.Errorf("the same bad bytes were loaded again: %+v, %d loads before, %d after", r, loads, h.loads.Load())
	}
	if err := h.w.Reload(); err == nil || !strings.Contains(err.Error(), `cannot parse "bad one"`) {
		t.Errorf("Reload of a bad file = %v", err)
	}
	if s := h.w.Status(); s.Failures != 2 {
		t.Errorf("Reload of a bad file is not counted: %+v", s)
	}
	r = h.change(func() { replaceFile(t, h.path, "reject me") })
	if r.status.Failures != 3 || r.status.Version != Digest([]byte("v1")) || !strings.Contains(r.status.LastError.Error(), `refusing "reject me"`) {
		t.Fatalf("after a file apply refuses: %+v", r)
	}
	h.wantApplied("v1")
	r = h.change(func() { replaceFile(t, h.path, "v2") })
	if !r.did || r.status.Version != Digest([]byte("v2")) || r.status.LastError != nil || r.status.Successes != 2 || r.status.Failures != 3 {
		t.Fatalf("after a good file: %+v", r)
	}
	h.wantApplied("v1", "v2")

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					stage, _ := p.Attributes.Value("sluice.reload.stage")
					got[m.Name+"/"+stage.AsString()] += p.Value
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					v, _ := p.Attributes.Value("sluice.reload.version")
					got[m.Name+"/"+v.AsString()] = p.Value
				}
			}
		}
	}
	want := map[string]int64{
		MetricSuccesses + "/": 1, MetricFailures + "/load": 2, MetricFailures + "/apply": 1,
		MetricVersion + "/" + Digest([]byte("v2")): r.status.LoadedAt.Unix(),
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("metric %s = %d, want %d (all: %v)", k, got[k], v, got)
		}
	}
	if len(got) != len(want) {
		t.Errorf("metrics %v, want %v", got, want)
	}
}

// TestReloadOnDemand checks Reload: it applies a new version at once, and
// neither it nor the change seen on disk applies the same bytes again.
func TestReloadOnDemand(t *testing.T) {
	h := newHarness(t, inDir(t), Options{})
	h.quiesce()
	replaceFile(t, h.path, "v2")
	if err := h.w.Reload(); err != nil {
		t.Fatal(err)
	}
	if s := h.w.Status(); s.Version != Digest([]byte("v2")) || s.Successes != 2 {
		t.Fatalf("after Reload: %+v", s)
	}
	if err := h.w.Reload(); err != nil {
		t.Fatal(err)
	}
	// The rename armed the debounce: its reload finds the version in force.
	if armed := h.quiesce(); armed != 1 {
		t.Errorf("the rename armed the debounce %d times, want 1", armed)
	}
	h.wantApplied("v1", "v2")
	if s := h.w.Status(); s.Successes != 2 || s.Failures != 0 {
		t.Errorf("the same bytes were counted again: %+v", s)
	}
}

// TestDebounce checks that a burst of changes makes one reload, of the
// last version, however many events it raised.
func TestDebounce(t *testing.T) {
	h := newHarness(t, inDir(t), Options{})
	h.quiesce()
	for i := 2; i <= 20; i++ {
		writeFile(t, h.path, "v"+strconv.Itoa(i))
	}
	select {
	case <-h.timer.armed:
	case <-time.After(waitLimit):
		t.Fatal("the writes armed no reload")
	}
	loads := h.loads.Load()
	if armed := h.quiesce(); armed != 0 {
		t.Errorf("the burst armed the debounce %d more times while it was armed", armed)
	}
	// quiesce did not fire: the debounce is still armed, as the burst left it.
	r := h.fire()
	if !r.did || r.status.Version != Digest([]byte("v20")) || h.loads.Load() != loads+1 {
		t.Fatalf("the burst's reload: %+v, %d loads", r, h.loads.Load()-loads)
	}
	h.wantApplied("v1", "v20")
	// Events on other files of the directory arm nothing.
	writeFile(t, filepath.Join(h.dir, "other"), "x")
	if armed := h.quiesce(); armed != 0 {
		t.Errorf("a write to another file armed the debounce %d times", armed)
	}
}

// TestWatchErrors checks what Watch refuses.
func TestWatchErrors(t *testing.T) {
	dir := t.TempDir()
	load := func(p string) (string, error) {
		b, err := os.ReadFile(p)
		if err == nil && string(b) == "bad" {
			err = errors.New("bad content")
		}
		return string(b), err
	}
	apply := func(string) error { return nil }
	good := filepath.Join(dir, "good")
	writeFile(t, good, "ok")
	bad := filepath.Join(dir, "bad")
	writeFile(t, bad, "bad")
	for name, f := range map[string]func() (*Watcher, error){
		"missing file": func() (*Watcher, error) {
			return Watch(context.Background(), filepath.Join(dir, "none"), load, apply, Options{})
		},
		"missing dir": func() (*Watcher, error) {
			return Watch(context.Background(), filepath.Join(dir, "no", "f"), load, apply, Options{})
		},
		"bad first load": func() (*Watcher, error) { return Watch(context.Background(), bad, load, apply, Options{}) },
		"apply refuses": func() (*Watcher, error) {
			return Watch(context.Background(), good, load, func(string) error { return errors.New("no") }, Options{})
		},
		"no path":           func() (*Watcher, error) { return Watch(context.Background(), "", load, apply, Options{}) },
		"no load":           func() (*Watcher, error) { return Watch[string](context.Background(), good, nil, apply, Options{}) },
		"negative debounce": func() (*Watcher, error) { return Watch(context.Background(), good, load, apply, Options{Debounce: -1}) },
	} {
		if w, err := f(); err == nil || w != nil {
			t.Errorf("%s: Watch = %v, %v; want an error", name, w, err)
			if w != nil {
				w.Close()
			}
		}
	}
	_, err := Watch(context.Background(), bad, load, apply, Options{})
	if !strings.Contains(err.Error(), "bad content") || !strings.Contains(err.Error(), bad) {
		t.Errorf("the first load's error %q names neither the file nor the cause", err)
	}
}

// TestCloseStops checks that Close and the end of Watch's context stop
// the watcher's goroutine, and that Reload works after.
func TestCloseStops(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	writeFile(t, p, "v1")
	var applied atomic.Int64
	load := func(p string) ([]byte, error) { return os.ReadFile(p) }
	apply := func([]byte) error { applied.Add(1); return nil }
	ctx, cancel := context.WithCancel(context.Background())
	w, err := Watch(ctx, p, load, apply, Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case <-w.done:
	case <-time.After(waitLimit):
		t.Fatal("the watcher runs on after its context ended")
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	writeFile(t, p, "v2")
	if err := w.Reload(); err != nil || applied.Load() != 2 {
		t.Errorf("Reload after Close: %v, %d applied", err, applied.Load())
	}
}
