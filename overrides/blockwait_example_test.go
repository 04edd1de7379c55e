package overrides_test

import (
	"fmt"
	"time"

	"github.com/sluice-go/sluice/overrides"
)

// A block announces the wait until it ends, at most MaxBlockWait: the
// same wait in an HTTP Retry-After, a gRPC refusal and Envoy's
// duration_until_reset.
func ExampleOverride_BlockWait() {
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, until := range []time.Time{now.Add(90 * time.Second), now.Add(48 * time.Hour), {}} {
		o := overrides.Override{Policy: "per-ip", Identity: "ip:192.0.2.7", Kind: overrides.Block, Until: until}
		fmt.Println(o.BlockWait(now))
	}
	// Output:
	// 1m30s
	// 1h0m0s
	// 1h0m0s
}
