package httplimit

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice"
)

var testLimit = sluice.Must(sluice.FixedWindow(2, time.Minute)).Named("test")

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// testStart is 20 s into an epoch-aligned minute.
var testStart = time.Unix(1_700_000_000, 0)

// testEnv is a Limiter on miniredis with a clock the test moves.
type testEnv struct {
	lim *sluice.Limiter
	mr  *miniredis.Miniredis
	now time.Time
}

func (e *testEnv) clock() time.Time { return e.now }

func newTestEnv(t testing.TB, opts ...sluice.Option) *testEnv {
	t.Helper()
	mr := miniredis.RunT(t)
	mr.SetTime(testStart)
	mr.ClockTTL(true)
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{mr.Addr()},
		DisableCache: true, ForceSingleClient: true, DisableRetry: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	e := &testEnv{mr: mr, now: testStart}
	opts = append([]sluice.Option{sluice.WithClock(e.clock), sluice.WithTimeout(5 * time.Second), sluice.WithLogger(nil)}, opts...)
	if e.lim, err = sluice.New(client, opts...); err != nil {
		t.Fatal(err)
	}
	return e
}

func testLimiter(t testing.TB) *sluice.Limiter { return newTestEnv(t).lim }
