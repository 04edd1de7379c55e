package reload

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
)

// yamlOnly is the match of the directory tests: *.yaml, no dot files.
func yamlOnly(name string) bool {
	return strings.HasSuffix(name, ".yaml") && !strings.HasPrefix(name, ".")
}

// newDirHarness watches a directory of the test's own holding a.yaml
// (v1) and b.yaml (w1). A version is the matched files' contents joined
// by "|" in name order; one holding "bad" fails to load.
func newDirHarness(t *testing.T, setup func(dir string)) *harness {
	t.Helper()
	dir := t.TempDir()
	setup(dir)
	h := &harness{t: t, dir: dir, path: dir, timer: &fakeTimer{c: make(chan time.Time), armed: make(chan time.Duration, 1024)},
		reloads: make(chan reloadResult, 1024), seen: make(chan fsnotify.Event, 1<<16), log: &syncBuffer{}}
	load := func(p string) (func() error, error) {
		h.loads.Add(1)
		entries, err := os.ReadDir(p)
		if err != nil {
			return nil, err
		}
		var names, parts []string
		for _, e := range entries {
			if yamlOnly(e.Name()) {
				names = append(names, e.Name())
			}
		}
		sort.Strings(names)
		for _, n := range names {
			data, err := os.ReadFile(filepath.Join(p, n))
			if err != nil {
				return nil, err
			}
			parts = append(parts, string(data))
		}
		v := strings.Join(parts, "|")
		if strings.Contains(v, "bad") {
			return nil, errors.New("cannot parse " + v)
		}
		return func() error {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.applied = append(h.applied, v)
			return nil
		}, nil
	}
	w, err := startDir(context.Background(), dir, yamlOnly, load, Options{Logger: slog.New(slog.NewTextHandler(h.log, nil))}, hooks{
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

func twoFiles(t *testing.T) func(dir string) {
	return func(dir string) {
		writeFile(t, filepath.Join(dir, "a.yaml"), "v1")
		writeFile(t, filepath.Join(dir, "b.yaml"), "w1")
	}
}

// TestWatchDir checks each way a directory's configuration changes: a
// file edited in place, replaced by a rename, added, removed; a file the
// match leaves out changes nothing; a bad version is refused and the next
// good one applied.
func TestWatchDir(t *testing.T) {
	h := newDirHarness(t, twoFiles(t))
	h.wantApplied("v1|w1")
	if st := h.w.Status(); st.Path != h.dir || st.Successes != 1 {
		t.Fatalf("status %+v", st)
	}
	a, b, c := filepath.Join(h.dir, "a.yaml"), filepath.Join(h.dir, "b.yaml"), filepath.Join(h.dir, "c.yaml")
	steps := []struct {
		name    string
		change  func()
		did     bool
		applied string // "" when nothing is applied
	}{
		{"edit in place", func() { writeFile(t, a, "v2") }, true, "v2|w1"},
		{"replace by rename", func() { replaceFile(t, b, "w2") }, true, "v2|w2"},
		{"add a file", func() { writeFile(t, c, "x1") }, true, "v2|w2|x1"},
		{"a file not matched", func() { writeFile(t, filepath.Join(h.dir, "notes.txt"), "hello") }, false, ""},
		{"a bad version", func() { writeFile(t, c, "bad") }, true, ""},
		{"remove a file", func() {
			if err := os.Remove(c); err != nil {
				t.Fatal(err)
			}
		}, true, "v2|w2"},
	}
	want := []string{"v1|w1"}
	for _, s := range steps {
		r := h.change(s.change)
		if r.did != s.did {
			t.Fatalf("%s: reload did %v, want %v", s.name, r.did, s.did)
		}
		if s.applied != "" {
			want = append(want, s.applied)
		}
		h.wantApplied(want...)
	}
	if st := h.w.Status(); st.Failures != 1 || st.LastError != nil {
		t.Errorf("status after a refused version and a good one: %+v", st)
	}
}

// TestWatchDirLinkSwap swaps a directory's ..data link the way a
// Kubernetes ConfigMap volume does: the files are links through it.
func TestWatchDirLinkSwap(t *testing.T) {
	h := newDirHarness(t, func(dir string) {
		for _, v := range []string{"..v1", "..v2"} {
			if err := os.Mkdir(filepath.Join(dir, v), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		writeFile(t, filepath.Join(dir, "..v1", "a.yaml"), "v1")
		writeFile(t, filepath.Join(dir, "..v2", "a.yaml"), "v2")
		if err := os.Symlink("..v1", filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join("..data", "a.yaml"), filepath.Join(dir, "a.yaml")); err != nil {
			t.Fatal(err)
		}
	})
	h.wantApplied("v1")
	r := h.change(func() {
		tmp := filepath.Join(h.dir, "..data_tmp")
		if err := os.Symlink("..v2", tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(h.dir, "..data")); err != nil {
			t.Fatal(err)
		}
	})
	if !r.did {
		t.Fatal("the link swap was not reloaded")
	}
	h.wantApplied("v1", "v2")
}

func TestWatchDirErrors(t *testing.T) {
	ok := func(string) (int, error) { return 0, nil }
	apply := func(int) error { return nil }
	file := filepath.Join(t.TempDir(), "f.yaml")
	writeFile(t, file, "x")
	for _, tc := range []struct {
		name, dir, want string
	}{
		{"no directory", "", "needs a directory"},
		{"missing", filepath.Join(t.TempDir(), "nope"), "no such file"},
		{"a file", file, "is not a directory"},
	} {
		if _, err := WatchDir(context.Background(), tc.dir, yamlOnly, ok, apply, Options{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	dir := t.TempDir()
	bad := func(string) (int, error) { return 0, errors.New("broken") }
	if _, err := WatchDir(context.Background(), dir, yamlOnly, bad, apply, Options{}); err == nil || !strings.Contains(err.Error(), "first load") {
		t.Errorf("first load failing: %v", err)
	}
}
