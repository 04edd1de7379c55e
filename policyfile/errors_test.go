package policyfile_test

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-go/sluice/policyfile"
)

var update = flag.Bool("update", false, "rewrite testdata/errors/*.err from what Parse reports")

// TestErrors parses each file of testdata/errors and wants exactly the
// errors of its .err file, one file:line:col: message per line, every
// problem of the file reported in one run.
func TestErrors(t *testing.T) {
	files, _ := filepath.Glob("testdata/errors/*.yaml")
	json, _ := filepath.Glob("testdata/errors/*.json")
	files = append(files, json...)
	if len(files) < 10 {
		t.Fatalf("error cases: %v", files)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			_, err := policyfile.Load(f)
			var es policyfile.Errors
			if !errors.As(err, &es) {
				t.Fatalf("Load = %v, want policyfile.Errors", err)
			}
			got := err.Error() + "\n"
			golden := strings.TrimSuffix(f, filepath.Ext(f)) + ".err"
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -update to write it)", err)
			}
			if got != string(want) {
				t.Errorf("errors:\n%s\nwant (%s):\n%s", got, golden, want)
			}
			for _, e := range es {
				if e.File != f || e.Line < 1 || e.Col < 1 {
					t.Errorf("error without a position: %#v", e)
				}
			}
		})
	}
}
