package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/sluice-go/sluice/internal/redisserver"
	"github.com/sluice-go/sluice/internal/testsize"
)

// burst sends n GETs at once to base from the loopback address ip (a
// client identity of its own) and counts the answers by status.
func burst(t *testing.T, base, ip string, n int) map[int]int {
	t.Helper()
	tr := &http.Transport{
		DialContext:     (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 30 * time.Second}).DialContext,
		MaxIdleConns:    n,
		MaxConnsPerHost: 0,
	}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 60 * time.Second}
	var (
		mu    sync.Mutex
		codes = map[int]int{}
		wg    sync.WaitGroup
		start = make(chan struct{})
	)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			code := -1
			if resp, err := c.Get(base + "/"); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				code = resp.StatusCode
			}
			mu.Lock()
			codes[code]++
			mu.Unlock()
		}()
	}
	close(start)
	wg.Wait()
	return codes
}

// The demo with its default flags (chi, GCRA, -limit 50; a window of an
// hour so no refill can land during a burst on a loaded machine), on the
// embedded miniredis and on a real redis-server: a burst of 200, and one
// of 1,000, simultaneous requests from one client admits exactly 50, in
// each of 20 runs (5 without SLUICE_TEST_FULL; each run from its own
// loopback address, so its own quota), and nothing is decided by the
// failure policy.
func TestBurstExact(t *testing.T) {
	if testing.Short() {
		t.Skip("80 bursts of up to 1,000 requests")
	}
	runs := testsize.Pick(5, 20)
	for _, backend := range []string{"embedded", "redis-server"} {
		t.Run(backend, func(t *testing.T) {
			args := []string{"-framework", "chi", "-limit", "50", "-window", "1h"}
			if backend == "redis-server" {
				s := redisserver.Start(t)
				args = append(args, "-redis", "redis://"+s.Addr)
			}
			d := startDemo(t, args...)
			run, exact := 0, map[int]int{}
			for _, n := range []int{200, 1000} {
				for range runs {
					run++
					ip := fmt.Sprintf("127.0.%d.%d", 1+run/250, 1+run%250)
					codes := burst(t, d.base, ip, n)
					if codes[http.StatusOK] == 50 && codes[http.StatusTooManyRequests] == n-50 {
						exact[n]++
					} else {
						t.Errorf("%s: burst of %d from %s: %v; want 50 × 200 and %d × 429", backend, n, ip, codes, n-50)
					}
				}
			}
			// The summary lines count every decision; let the last second's print.
			waitFor := time.Now().Add(10 * time.Second)
			allowed, denied, degraded := d.totals()
			for allowed+denied < runs*200+runs*1000 && time.Now().Before(waitFor) {
				time.Sleep(100 * time.Millisecond)
				allowed, denied, degraded = d.totals()
			}
			t.Logf("%s: exactly 50 admitted in %d of %d bursts of 200 and %d of %d bursts of 1,000; the demo counted allowed=%d denied=%d degraded=%d",
				backend, exact[200], runs, exact[1000], runs, allowed, denied, degraded)
			if degraded != 0 {
				t.Errorf("%s: %d decisions by the failure policy while Redis answered", backend, degraded)
			}
		})
	}
}
