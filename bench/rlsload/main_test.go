package main

import (
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/sluice-go/sluice/internal/redisserver"
)

// TestWorkloadExact runs the comparison's workload, smaller, against
// sluice-rls alone, as the comparison does (a built binary on its own
// redis-server): with one and with three descriptors per request at 16
// streams, exactly the admissions exact limits allow (40 of each client's
// 50), and with three the tenant charged exactly those. A service that
// charged a refused request's other descriptors would run the tenant out
// (its limit is 90% of the requests) and refuse clients within theirs.
func TestWorkloadExact(t *testing.T) {
	s := redisserver.Start(t)
	dir := t.TempDir()
	bin, err := buildSluice(dir)
	if err != nil {
		t.Fatal(err)
	}
	const requests = 40 * perClient
	tenantLimit := requests * 9 / 10
	cfgDir := filepath.Join(dir, "config")
	if err := writeConfig(cfgDir, tenantLimit); err != nil {
		t.Fatal(err)
	}
	cmd, target, logs, err := start("sluice-rls", func(g, h, _ int) *exec.Cmd { return sluiceCmd(bin, cfgDir, s.Addr, g, h) })
	stop := func() {
		if cmd != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait() // then nothing writes logs any more
			cmd = nil
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	want := requests / perClient * clientLimit
	for _, descs := range []int{1, 3} {
		var r result
		err := inOneHour(func() error {
			if _, err := s.Command("FLUSHALL"); err != nil {
				return err
			}
			r, err = load(target, descs, 16, requests, tenantLimit)
			return err
		})
		if err != nil {
			stop()
			t.Fatalf("%d descriptors: %v\nsluice-rls said: %s", descs, err, logs)
		}
		if r.admitted != want || r.admitted+r.refused != requests {
			t.Errorf("%d descriptors: %d admitted, %d refused; want %d admitted of %d", descs, r.admitted, r.refused, want, requests)
		}
		if descs == 3 && r.charged != r.admitted {
			t.Errorf("3 descriptors: the tenant was charged %d for %d admitted requests", r.charged, r.admitted)
		}
		if r.rps <= 0 || r.p50 <= 0 || r.p99 < r.p50 {
			t.Errorf("%d descriptors: %.0f requests/s, p50 %v, p99 %v", descs, r.rps, r.p50, r.p99)
		}
	}
}
