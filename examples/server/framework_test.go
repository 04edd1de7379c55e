//go:build !gin

package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// Without its build tag a framework is not in the binary, and asking for
// it is a usage error that says how to build it in.
func TestFrameworkNotBuiltIn(t *testing.T) {
	var stderr bytes.Buffer
	_, err := parseFlags([]string{"-framework", "gin"}, &stderr)
	if !errors.Is(err, errUsage) || !strings.Contains(stderr.String(), "go run -tags gin ./examples/server -framework gin") {
		t.Fatalf("-framework gin without the gin tag: %v, %q; want a usage error naming the tag", err, stderr.String())
	}
	if _, err := parseFlags([]string{"-framework", "nethttp"}, &stderr); err != nil {
		t.Fatalf("-framework nethttp: %v", err)
	}
}
