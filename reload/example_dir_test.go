package reload_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/sluice-go/sluice/reload"
)

// ExampleWatchDir keeps a configuration made of a directory's *.yaml files
// in force: each version of the directory (a file added, changed or
// removed) is loaded whole and applied. Reload reads it at once, as on
// SIGHUP; a change on disk does the same by itself.
func ExampleWatchDir() {
	dir, err := os.MkdirTemp("", "limits")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	write := func(name, data string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			panic(err)
		}
	}
	write("a.yaml", "domain: a")

	isYAML := func(name string) bool { return strings.HasSuffix(name, ".yaml") }
	load := func(dir string) ([]string, error) { // a real loader parses the files
		names, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
		for i, n := range names {
			names[i] = filepath.Base(n)
		}
		return names, err
	}
	apply := func(files []string) error {
		fmt.Println("in force:", files)
		return nil
	}
	w, err := reload.WatchDir(context.Background(), dir, isYAML, load, apply, reload.Options{})
	if err != nil {
		panic(err)
	}
	defer w.Close()

	write("b.yaml", "domain: b")
	if err := w.Reload(); err != nil {
		panic(err)
	}
	write("notes.txt", "not a configuration file")
	if err := w.Reload(); err != nil { // the same version: nothing applied
		panic(err)
	}
	fmt.Println("versions applied:", w.Status().Successes)
	// Output:
	// in force: [a.yaml]
	// in force: [a.yaml b.yaml]
	// versions applied: 2
}
