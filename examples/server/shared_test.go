package main

import (
	"net/http"
	"strings"
	"testing"

	"github.com/sluice-go/sluice/internal/redisserver"
)

// The headline: replicas sharing one Redis share one quota. Three demo
// processes on three ports, one client sending 500 requests round-robin
// under 100 per hour per client IP: exactly 100 are admitted in all. Three
// replicas each limiting in their own memory would admit 300 (the control).

const (
	sharedLimit    = 100
	sharedRequests = 500
)

// roundRobin sends n GET / requests across demos in turn and returns how
// many each admitted and denied; any other status fails the test.
func roundRobin(t *testing.T, demos []*demo, n int) (allowed, denied []int) {
	t.Helper()
	allowed, denied = make([]int, len(demos)), make([]int, len(demos))
	for i := 0; i < n; i++ {
		k := i % len(demos)
		r := get(t, demos[k].base+"/")
		switch r.code {
		case http.StatusOK:
			allowed[k]++
		case http.StatusTooManyRequests:
			denied[k]++
		default:
			t.Fatalf("request %d to demo %d: status %d, body %s", i, k, r.code, r.body)
		}
	}
	return allowed, denied
}

func sum(xs []int) int {
	s := 0
	for _, x := range xs {
		s += x
	}
	return s
}

// checkShared sends the requests, checks the total admitted, and checks
// each demo's summary lines against what it answered, with no decision
// made by the failure policy.
func checkShared(t *testing.T, demos []*demo, want int) {
	t.Helper()
	allowed, denied := roundRobin(t, demos, sharedRequests)
	t.Logf("admitted per replica %v (total %d), denied %v (total %d)", allowed, sum(allowed), denied, sum(denied))
	if sum(allowed) != want || sum(denied) != sharedRequests-want {
		t.Fatalf("admitted %d and denied %d of %d requests across %d replicas; want %d admitted",
			sum(allowed), sum(denied), sharedRequests, len(demos), want)
	}
	for k, d := range demos {
		if allowed[k] == 0 {
			t.Errorf("replica %d admitted nothing: round-robin did not reach it", k)
		}
		d.stopAndCheck(t, allowed[k], denied[k])
	}
}

func startReplicas(t *testing.T, redisFlags ...string) []*demo {
	t.Helper()
	var demos []*demo
	for i, fw := range []string{"nethttp", "chi", "gin"} {
		args := []string{"-framework", fw, "-limit", "100", "-window", "1h"}
		if len(redisFlags) > 0 {
			args = append(args, "-redis", redisFlags[i%len(redisFlags)])
		}
		demos = append(demos, startDemo(t, args...))
	}
	return demos
}

func TestSharedQuotaStandalone(t *testing.T) {
	t.Parallel()
	srv := redisserver.Start(t)
	demos := startReplicas(t, "redis://"+srv.Addr, srv.Addr)
	for _, d := range demos {
		if !strings.Contains(d.output(), "state in Redis at "+srv.Addr) {
			t.Fatalf("banner does not name the Redis at %s:\n%s", srv.Addr, d.output())
		}
	}
	checkShared(t, demos, sharedLimit)
	checkKeys(t, []*redisserver.Server{srv})
}

// checkKeys checks that the nodes hold the quota's state as one key, on
// one node, under the client IP's hash tag.
func checkKeys(t *testing.T, nodes []*redisserver.Server) {
	t.Helper()
	var found []string
	for _, n := range nodes {
		count, err := n.Command("DBSIZE")
		if err != nil {
			t.Fatalf("DBSIZE on %s: %v", n.Addr, err)
		}
		if count != "0" {
			found = append(found, n.Addr+":"+count)
		}
		if count == "1" {
			k, err := n.Command("RANDOMKEY")
			if err != nil || !strings.HasPrefix(k, "sluice:{ip:127.0.0.1}:") {
				t.Fatalf("the key on %s is %q (%v); want sluice:{ip:127.0.0.1}:...", n.Addr, k, err)
			}
		}
	}
	if len(found) != 1 || !strings.HasSuffix(found[0], ":1") {
		t.Fatalf("keys per node %v; want one key on one node", found)
	}
}

func TestSharedQuotaCluster(t *testing.T) {
	t.Parallel()
	c := redisserver.StartCluster(t, 3)
	a := c.Addrs()
	demos := startReplicas(t,
		"redis://"+a[0]+"?addr="+a[1]+"&addr="+a[2], // a URL with every seed
		strings.Join(a, ","), // a comma list
		"redis://"+a[1],      // one seed: the client finds the others
	)
	for _, d := range demos {
		if !strings.Contains(d.output(), "state in Redis Cluster (3 nodes)") {
			t.Fatalf("banner does not show a 3-node cluster:\n%s", d.output())
		}
	}
	checkShared(t, demos, sharedLimit)
	checkKeys(t, c.Nodes)
}

// TestSeparateMemoryControl is the contrast: each replica on its own
// embedded miniredis, as with an in-process limiter, admits its own 100.
func TestSeparateMemoryControl(t *testing.T) {
	t.Parallel()
	checkShared(t, startReplicas(t), 3*sharedLimit)
}
