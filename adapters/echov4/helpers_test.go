package sluiceechov4_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice"
)

var oneAMinute = sluice.Must(sluice.FixedWindow(1, time.Minute))

func spoof(h http.Handler, xff string) int {
	r := httptest.NewRequest("GET", "/items/1", nil)
	r.RemoteAddr = "198.51.100.1:1"
	r.Header.Set("X-Forwarded-For", xff)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec.Code
}

// start is the instant the limiter's clock stands at (conformance.Start).
var start = time.Unix(1_700_000_000, 0)

// newLimiter returns a Limiter on an embedded miniredis whose clock stands
// at start: conformance.NewLimiter, copied so that this module does not
// require the test-only conformance module.
func newLimiter(t testing.TB) *sluice.Limiter {
	t.Helper()
	mr := miniredis.RunT(t)
	mr.SetTime(start)
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{mr.Addr()},
		DisableCache: true, ForceSingleClient: true, DisableRetry: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	lim, err := sluice.New(client, sluice.WithClock(func() time.Time { return start }), sluice.WithTimeout(5*time.Second), sluice.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	return lim
}
