package ratepolicy

import (
	"context"
	"errors"
	"testing"

	"github.com/sluice-go/sluice"
)

// TestConfigDecide checks that Config.Decide decides in place of the
// Limiter: it sees the checks the policies make, its Decision is what the
// Engine reports, and its error is the Engine's.
func TestConfigDecide(t *testing.T) {
	lim := testLimiter(t)
	var got []sluice.Check
	var fail error
	e, err := New(Config[string]{Pkg: "test", Limiter: lim, Policies: []Policy[string]{pol("a"), pol("b")},
		Decide: func(ctx context.Context, d *sluice.Decision, checks ...sluice.Check) error {
			got = append(got[:0], checks...)
			if fail != nil {
				return fail
			}
			// What the Limiter would answer with every check asked
			// and a's denied: its real answer, then a's flipped.
			if err := lim.DecideInto(ctx, d, checks...); err != nil {
				return err
			}
			d.Results[0].Allowed = false
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	var d Decision[string]
	ctx := context.Background()
	if err := e.Decide(ctx, "req", e.Applicable("req", nil), AllPolicies, &d); err != nil {
		t.Fatal(err)
	}
	e.Settle(ctx, &d, "/")
	if len(got) != 2 || got[0].Identity != "k" || got[1].Identity != "k" || got[0].Limit != pol("a").Limit {
		t.Fatalf("Decide saw %+v, want the checks of policies a and b on k", got)
	}
	if len(d.Outcomes) != 2 || !d.Outcomes[0].Denied || d.Outcomes[1].Denied || !d.Denied {
		t.Fatalf("outcomes %+v (denied %v), want a denied by the stub and b admitted", d.Outcomes, d.Denied)
	}
	fail = errors.New("stub down")
	d.Reset()
	if err := e.Decide(ctx, "req", e.Applicable("req", nil), AllPolicies, &d); !errors.Is(err, fail) {
		t.Fatalf("Decide = %v, want the stub's error", err)
	}
}
