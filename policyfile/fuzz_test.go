package policyfile_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/sluice-go/sluice/policyfile"
)

// FuzzParse: Parse never panics, and a file it accepts writes out
// (Marshal) and reads back the same.
func FuzzParse(f *testing.F) {
	seeds := exampleFiles(f)
	errs, _ := filepath.Glob("testdata/errors/*")
	for _, name := range append(seeds, errs...) {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := policyfile.Parse("fuzz.yaml", data)
		if err != nil {
			return
		}
		out, err := policyfile.Marshal(c)
		if err != nil {
			t.Fatalf("Marshal of a parsed file: %v\nfile:\n%s", err, data)
		}
		back, err := policyfile.Parse("out.yaml", out)
		if err != nil || !policyfile.Equal(c, back) {
			t.Fatalf("Parse(Marshal(c)) = %v, or differs:\n%s\nfrom:\n%s", err, out, data)
		}
	})
}
