package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/sluice-go/sluice/admin"
	"github.com/sluice-go/sluice/internal/redisserver"
)

// writeFile replaces path's content as an editor does: a temporary file
// renamed over it.
func writeFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// perIPQuota is the q of the per-ip item of a response's RateLimit-Policy.
func perIPQuota(r response) int {
	m := regexp.MustCompile(`"per-ip";q=(\d+)`).FindStringSubmatch(r.header.Get("RateLimit-Policy"))
	if m == nil {
		return -1
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// TestPolicyFileReload runs the demo on the shipped policy file, edits the
// file under it, and checks the running server's limits follow: a good
// version is in force on the next requests, a broken one is refused and
// logged while the last good one keeps serving, and SIGHUP reloads too.
func TestPolicyFileReload(t *testing.T) {
	t.Parallel()
	shipped, err := os.ReadFile("policies.yaml")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "policies.yaml")
	writeFile(t, path, string(shipped))
	d := startDemo(t, "-config", path)
	if !strings.Contains(d.output(), "limits from "+path) {
		t.Fatalf("banner does not name the policy file:\n%s", d.output())
	}
	if q := perIPQuota(get(t, d.base+"/")); q != 10 {
		t.Fatalf("per-ip quota %d, want the file's 10", q)
	}

	const perIP = "limit: {algorithm: gcra, rate: 10, period: 1m, burst: 10}"
	if !strings.Contains(string(shipped), perIP) {
		t.Fatalf("policies.yaml no longer holds %q: update this test", perIP)
	}
	writeFile(t, path, strings.Replace(string(shipped), perIP, "limit: {algorithm: gcra, rate: 50, period: 1m, burst: 50}", 1))
	eventually(t, recoverDeadline, func() string { return "the edited file's quota of 50 is not in force\n" + d.errors() },
		func() bool { return perIPQuota(get(t, d.base+"/")) == 50 })

	// A broken version is refused; the last good one keeps serving.
	writeFile(t, path, string(shipped)+"\npolicies: [oops\n")
	eventually(t, recoverDeadline, func() string { return "the broken file was not reported:\n" + d.errors() },
		func() bool { return strings.Contains(d.errors(), "refused") && strings.Contains(d.errors(), path+":") })
	if q := perIPQuota(get(t, d.base+"/")); q != 50 {
		t.Fatalf("after a broken edit the quota is %d, want the last good version's 50", q)
	}

	// SIGHUP reloads (here, a file put back while nothing else changes it).
	writeFile(t, path, string(shipped))
	if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	eventually(t, recoverDeadline, func() string { return "the restored file's quota of 10 is not in force" },
		func() bool { return perIPQuota(get(t, d.base+"/")) == 10 })
}

// TestInspectShowsTheDemo runs the demo on a redis-server with the
// shipped policy file, and checks that "sluice inspect" on that Redis
// shows what the demo's last response said.
func TestInspectShowsTheDemo(t *testing.T) {
	t.Parallel()
	srv := redisserver.Start(t)
	d := startDemo(t, "-config", "policies.yaml", "-redis", "redis://"+srv.Addr)
	var last response
	for range 3 {
		last = getWith(t, d.base+"/hello/ada", "X-API-Key", "demo")
	}
	m := regexp.MustCompile(`"hello";r=(\d+)`).FindStringSubmatch(last.header.Get("RateLimit"))
	if last.code != 200 || m == nil {
		t.Fatalf("demo answered %d, RateLimit %q", last.code, last.header.Get("RateLimit"))
	}
	var out, errOut bytes.Buffer
	code := admin.Run(context.Background(), []string{"inspect", "-config", "policies.yaml", "-redis", "redis://" + srv.Addr, "-json",
		"ip=127.0.0.1", "api_key=demo", "route=GET /hello/{name}"}, &out, &errOut)
	if code != 0 {
		t.Fatalf("sluice inspect = %d: %s", code, errOut.String())
	}
	var lines []struct {
		Policy    string `json:"policy"`
		Remaining *int64 `json:"remaining"`
	}
	if err := json.Unmarshal(out.Bytes(), &lines); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, l := range lines {
		if l.Policy == "hello" {
			found = true
			if l.Remaining == nil || strconv.FormatInt(*l.Remaining, 10) != m[1] {
				t.Fatalf("inspect says hello has %v left; the demo's last response said %s", l.Remaining, m[1])
			}
		}
	}
	if !found {
		t.Fatalf("inspect shows no hello policy:\n%s", out.String())
	}
}
