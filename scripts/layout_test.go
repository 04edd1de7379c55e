package scripts_test

import (
	"context"
	"slices"
	"strings"
	"testing"
)

// TestStateOfAnotherForm: the string-state scripts read a key they did not
// write (the hash {tat, r} or {w, n, ...} that earlier versions kept, or a
// string of another form) as no state, without an error: a call replies
// exactly as on a missing key, an admission replaces the key with the
// script's own state and TTL, and a call that writes nothing leaves it
// alone.
func TestStateOfAnotherForm(t *testing.T) {
	const now = "1700000000000000"
	cases := []struct {
		script string
		args   []string // before cost
		hash   []string // the fields earlier versions wrote
		n      int      // keys (the multi-limit scripts)
	}{
		{"fixed_window", []string{"3", "1000000"}, []string{"w", "1700000000", "n", "3"}, 1},
		{"sliding_window", []string{"3", "1000000"}, []string{"w", "1700000000", "c", "3", "p", "3"}, 1},
		{"token_bucket", []string{"3", "1000000", "3"}, []string{"t", now, "v", "0"}, 1},
		{"gcra", []string{"3", "1000000", "3"}, []string{"tat", "1700000009000000", "r", "0"}, 1},
		{"gcra_multi", nil, []string{"tat", "1700000009000000", "r", "0"}, 2},
		{"sliding_window_multi", nil, []string{"w", "1700000000", "c", "3", "p", "3"}, 2},
		{"fixed_window_multi", nil, []string{"w", "1700000000", "n", "3"}, 2},
	}
	argv := func(script string, cost string, n int) []string {
		switch script {
		case "gcra_multi":
			return append([]string{cost, now, ""}, slices.Repeat([]string{"3", "1000000", "3"}, n)...)
		case "sliding_window_multi", "fixed_window_multi":
			return append([]string{cost, now, ""}, slices.Repeat([]string{"3", "1000000"}, n)...)
		}
		return nil
	}
	for _, b := range backends(t) {
		t.Run(b.Name(), func(t *testing.T) {
			ctx := context.Background()
			for _, c := range cases {
				args := func(cost string) []string {
					if a := argv(c.script, cost, c.n); a != nil {
						return a
					}
					return append(slices.Clone(c.args), cost, now, "")
				}
				keys := func(prefix string) []string {
					var ks []string
					for i := 0; i < c.n; i++ {
						ks = append(ks, "sluice:{"+prefix+"-"+c.script+"}:"+string(rune('a'+i)))
					}
					return ks
				}
				fresh, other := keys("fresh"), keys("other")
				for _, form := range []string{"hash", "string"} {
					for _, k := range append(slices.Clone(fresh), other...) {
						if _, err := b.Do(ctx, "DEL", k); err != nil {
							t.Fatal(err)
						}
					}
					for _, k := range other {
						var err error
						if form == "hash" {
							_, err = b.Do(ctx, append([]string{"HSET", k}, c.hash...)...)
						} else {
							_, err = b.Do(ctx, "SET", k, "not:a:state:of:any:script")
						}
						if err == nil {
							_, err = b.Do(ctx, "PEXPIRE", k, "600000")
						}
						if err != nil {
							t.Fatal(err)
						}
					}
					// A call that writes nothing (cost 0, then a cost that
					// never fits) replies as on a missing key and leaves
					// the key alone.
					for _, cost := range []string{"0", "4"} {
						snaps := make([]string, len(other))
						for i, k := range other {
							snaps[i] = snapshot(ctx, t, b, k)
						}
						want := mustInts(ctx, t, b, c.script, fresh, args(cost))
						got := mustInts(ctx, t, b, c.script, other, args(cost))
						if !slices.Equal(got, want) {
							t.Errorf("%s on a %s, cost %s: reply %v, want %v as on a missing key", c.script, form, cost, got, want)
						}
						for i, k := range other {
							if s := stripTTL(snapshot(ctx, t, b, k)); s != stripTTL(snaps[i]) {
								t.Errorf("%s on a %s, cost %s: %s changed from %s to %s", c.script, form, cost, k, snaps[i], s)
							}
							if ttl, err := b.Do(ctx, "PTTL", k); err != nil || ttl.(int64) <= 0 {
								t.Errorf("%s on a %s, cost %s: %s has PTTL %v (%v), want its own TTL", c.script, form, cost, k, ttl, err)
							}
						}
					}
					// An admission replaces it with the script's state.
					want := mustInts(ctx, t, b, c.script, fresh, args("1"))
					got := mustInts(ctx, t, b, c.script, other, args("1"))
					if !slices.Equal(got, want) || got[0] != 1 {
						t.Errorf("%s on a %s: admission replied %v, want %v as on a missing key", c.script, form, got, want)
					}
					for i, k := range other {
						if s, w := stripTTL(snapshot(ctx, t, b, k)), stripTTL(snapshot(ctx, t, b, fresh[i])); s != w {
							t.Errorf("%s on a %s: %s holds %s after the admission, want %s", c.script, form, k, s, w)
						}
						if ttl, err := b.Do(ctx, "PTTL", k); err != nil || ttl.(int64) <= 0 {
							t.Errorf("%s on a %s: %s has PTTL %v (%v) after the admission", c.script, form, k, ttl, err)
						}
					}
				}
			}
		})
	}
}

// mustInts runs script and returns its reply, failing the test on any error.
func mustInts(ctx context.Context, t *testing.T, b backend, script string, keys, args []string) []int64 {
	t.Helper()
	res, err := b.Eval(ctx, source(t, script), keys, args)
	if err != nil {
		t.Fatalf("%s %v: %v", script, args, err)
	}
	got, err := res.ints()
	if err != nil {
		t.Fatalf("%s %v: %v", script, args, err)
	}
	return got
}

// stripTTL drops the PTTL from a snapshot (a running clock moves it).
func stripTTL(s string) string {
	if i := strings.LastIndex(s, " pttl="); i >= 0 {
		return s[:i]
	}
	return s
}
