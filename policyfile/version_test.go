package policyfile_test

import (
	"os"
	"testing"

	"github.com/sluice-go/sluice/policyfile"
	"github.com/sluice-go/sluice/reload"
)

// TestVersionIsReloadDigest: a file without a version is named as the
// reload watcher names it, so a request's Decision.Version and the
// watcher's Status agree.
func TestVersionIsReloadDigest(t *testing.T) {
	data, err := os.ReadFile("../examples/server/policies.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c, err := policyfile.Parse("policies.yaml", data)
	if err != nil {
		t.Fatal(err)
	}
	if c.Version != reload.Digest(data) {
		t.Fatalf("Version %q, reload.Digest %q", c.Version, reload.Digest(data))
	}
}
