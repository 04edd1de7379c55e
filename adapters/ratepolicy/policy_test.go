package ratepolicy

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice"
)

// testLimiter is a Limiter on miniredis. The validation tests never call
// it; New only needs one.
func testLimiter(t *testing.T) *sluice.Limiter {
	t.Helper()
	mr := miniredis.RunT(t)
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{mr.Addr()}, DisableCache: true, ForceSingleClient: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	lim, err := sluice.New(client, sluice.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lim.Close() })
	return lim
}

func gcra(rate int64, period time.Duration, burst int64) sluice.Limit {
	return sluice.Must(sluice.GCRA(rate, period, burst))
}

// pol is a policy named name on a 10-per-minute GCRA limit.
func pol(name string) Policy[string] {
	return Policy[string]{Name: name, Limit: gcra(10, time.Minute, 10), Key: fixed("k")}
}

func TestCompile(t *testing.T) {
	conc := sluice.Must(sluice.Concurrency(8, time.Minute))
	for _, tc := range []struct {
		name     string
		p        Policy[string]
		wantName string // the compiled Name, when valid
		wantItem string
		wantWin  int64
		wantErr  string
	}{
		{"rate limit", pol("per-ip"), "per-ip", `"per-ip";q=10;w=60`, 60, ""},
		{"default name: the Limit's", Policy[string]{Limit: gcra(5, time.Second, 5), Key: fixed("k")}, "gcra-5-1s-5", `"gcra-5-1s-5";q=5;w=1`, 1, ""},
		{"a sub-second window rounds up", Policy[string]{Name: "fast", Limit: gcra(1, 250*time.Millisecond, 1), Key: fixed("k")}, "fast", `"fast";q=1;w=1`, 1, ""},
		{"an uneven window rounds up", Policy[string]{Name: "w", Limit: gcra(1, 1500*time.Millisecond, 1), Key: fixed("k")}, "w", `"w";q=1;w=2`, 2, ""},
		{"concurrency", Policy[string]{Name: "in-flight", Limit: conc, Key: fixed("k")}, "in-flight", `"in-flight";q=8;qu="concurrent-requests"`, 0, ""},
		{"quote and backslash escaped", Policy[string]{Name: `a"b\c`, Limit: gcra(1, time.Second, 1), Key: fixed("k")}, `a"b\c`, `"a\"b\\c";q=1;w=1`, 1, ""},
		{"space and punctuation allowed", pol("per key; tier=free"), "per key; tier=free", `"per key; tier=free";q=10;w=60`, 60, ""},
		{"64 characters", pol(strings.Repeat("n", 64)), strings.Repeat("n", 64), `"` + strings.Repeat("n", 64) + `";q=10;w=60`, 60, ""},
		{"65 characters", pol(strings.Repeat("n", 65)), "", "", 0, "want 1 to 64 printable ASCII characters"},
		{"control character", pol("a\nb"), "", "", 0, `policy name "a\nb": want 1 to 64 printable ASCII characters`},
		{"non-ASCII", pol("zoë"), "", "", 0, "want 1 to 64 printable ASCII characters"},
		{"no Key", Policy[string]{Name: "x", Limit: gcra(1, time.Second, 1)}, "", "", 0, `test: Policies[3]: policy "x" has no Key`},
		{"no Limit", Policy[string]{Name: "x", Key: fixed("k")}, "", "", 0, "test: Policies[3]: sluice: invalid limit: no algorithm"},
		{"invalid Limit", Policy[string]{Name: "x", Limit: sluice.Limit{Algorithm: sluice.AlgGCRA, Rate: 0, Period: time.Second, Burst: 1, Name: "x"}, Key: fixed("k")},
			"", "", 0, "rate must be at least 1"},
		{"concurrency per message", Policy[string]{Name: "c", Limit: conc, Key: fixed("k"), PerMessage: true}, "", "", 0,
			`concurrency policy "c" cannot be charged per message`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := compile("test", tc.p, "Policies[3]")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.HasPrefix(err.Error(), "test: ") {
					t.Fatalf("error %v, want one starting test: and containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Name != tc.wantName || c.item != tc.wantItem || c.Window != tc.wantWin || c.quoted != sfString(tc.wantName) {
				t.Errorf("Name %q item %s Window %d quoted %s; want %q %s %d", c.Name, c.item, c.Window, c.quoted, tc.wantName, tc.wantItem, tc.wantWin)
			}
			if c.Conc != (tc.p.Limit.Algorithm == sluice.AlgConcurrency) {
				t.Errorf("Conc = %v", c.Conc)
			}
		})
	}
	if _, err := compile("test", Policy[string]{Key: fixed("k")}, "x"); !errors.Is(err, sluice.ErrInvalidLimit) {
		t.Errorf("an invalid Limit's error %v does not wrap sluice.ErrInvalidLimit", err)
	}
}

func TestCompileAllNamesTheIndex(t *testing.T) {
	_, err := compileAll("test", []Policy[string]{pol("a"), pol("b"), {Name: "c", Limit: gcra(1, time.Second, 1)}}, `Tiers["free"]`)
	if err == nil || err.Error() != `test: Tiers["free"][2]: policy "c" has no Key` {
		t.Errorf("error %v", err)
	}
	ps, err := compileAll("test", []Policy[string]{pol("a"), pol("b")}, "Policies")
	if err != nil || len(ps) != 2 || ps[0].Name != "a" || ps[1].Name != "b" {
		t.Errorf("compileAll = %v, %v", ps, err)
	}
}

func TestValidNameAndSFString(t *testing.T) {
	for _, tc := range []struct {
		in     string
		valid  bool
		quoted string
	}{
		{"per-ip", true, `"per-ip"`},
		{" ", true, `" "`},
		{"~!@#$%^&*()", true, `"~!@#$%^&*()"`},
		{`say "hi"`, true, `"say \"hi\""`},
		{`back\slash`, true, `"back\\slash"`},
		{"", false, ""},
		{"tab\t", false, ""},
		{"del\x7f", false, ""},
		{"é", false, ""},
		{strings.Repeat("x", 64), true, `"` + strings.Repeat("x", 64) + `"`},
		{strings.Repeat("x", 65), false, ""},
	} {
		if got := validName(tc.in); got != tc.valid {
			t.Errorf("validName(%q) = %v, want %v", tc.in, got, tc.valid)
		}
		if tc.valid {
			if got := sfString(tc.in); got != tc.quoted {
				t.Errorf("sfString(%q) = %s, want %s", tc.in, got, tc.quoted)
			}
		}
	}
}

func TestCeilSeconds(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want int64
	}{
		{0, 0}, {-time.Second, 0}, {sluice.RetryNever, 0}, {time.Nanosecond, 1}, {time.Second, 1},
		{time.Second + time.Nanosecond, 2}, {1500 * time.Millisecond, 2}, {time.Minute, 60}, {59*time.Second + 999*time.Millisecond, 60},
	} {
		if got := ceilSeconds(tc.d); got != tc.want {
			t.Errorf("ceilSeconds(%v) = %d, want %d", tc.d, got, tc.want)
		}
	}
}

func TestNewValidation(t *testing.T) {
	lim := testLimiter(t)
	tier := func(string) string { return "free" }
	same := gcra(10, time.Minute, 10) // two unnamed policies on it share its name
	for _, tc := range []struct {
		name string
		cfg  Config[string]
		want string // "" = valid
	}{
		{"one policy", Config[string]{Policies: []Policy[string]{pol("a")}}, ""},
		{"route policies only", Config[string]{Routes: map[string][]Policy[string]{"/r": {pol("a")}}}, ""},
		{"tier policies only", Config[string]{Tiers: map[string][]Policy[string]{"free": {pol("a")}}, Tier: tier, DefaultTier: "free"}, ""},
		{"one name in two routes: never both", Config[string]{Routes: map[string][]Policy[string]{"/r": {pol("a")}, "/s": {pol("a")}}}, ""},
		{"one name in two tiers: never both", Config[string]{Tiers: map[string][]Policy[string]{"free": {pol("t")}, "pro": {pol("t")}}, Tier: tier, DefaultTier: "free"}, ""},
		{"no Limiter", Config[string]{Policies: []Policy[string]{pol("a")}}, "test: no Limiter"},
		{"no policies", Config[string]{}, "test: no policies"},
		{"empty route and tier sets", Config[string]{Routes: map[string][]Policy[string]{"/r": {}}, Tiers: map[string][]Policy[string]{"free": {}}, Tier: tier, DefaultTier: "free"}, "test: no policies"},
		{"duplicate in Policies", Config[string]{Policies: []Policy[string]{pol("a"), pol("b"), pol("a")}}, `test: two policies named "a" can apply to one request`},
		{"duplicate default names", Config[string]{Policies: []Policy[string]{{Limit: same, Key: fixed("x")}, {Limit: same, Key: fixed("y")}}}, `two policies named "gcra-10-60s-10"`},
		{"Policies and a route", Config[string]{Policies: []Policy[string]{pol("a")}, Routes: map[string][]Policy[string]{"/r": {pol("a")}}}, `two policies named "a"`},
		{"duplicate in a route", Config[string]{Routes: map[string][]Policy[string]{"/r": {pol("b"), pol("b")}}}, `two policies named "b"`},
		{"Policies and a tier", Config[string]{Policies: []Policy[string]{pol("a")}, Tiers: map[string][]Policy[string]{"free": {pol("a")}}, Tier: tier, DefaultTier: "free"}, `two policies named "a"`},
		{"a route and a tier", Config[string]{Routes: map[string][]Policy[string]{"/r": {pol("r")}}, Tiers: map[string][]Policy[string]{"free": {pol("r")}}, Tier: tier, DefaultTier: "free"}, `two policies named "r"`},
		{"a route's invalid policy names the route", Config[string]{Routes: map[string][]Policy[string]{"/pkg.Svc/*": {pol("ok"), pol("a\x01")}}, RoutesField: "Methods"},
			`test: Methods["/pkg.Svc/*"][1]: policy name "a\x01": want 1 to 64`},
		{"a tier's invalid policy names the tier", Config[string]{Tiers: map[string][]Policy[string]{"free": {{Name: "x", Limit: same}}}, Tier: tier, DefaultTier: "free"},
			`test: Tiers["free"][0]: policy "x" has no Key`},
		{"Policies' invalid policy", Config[string]{Policies: []Policy[string]{pol("a\x00")}}, `test: Policies[0]: policy name "a\x00"`},
		{"Tiers without Tier", Config[string]{Tiers: map[string][]Policy[string]{"free": {pol("a")}}, DefaultTier: "free"}, "test: Tiers without a Tier func"},
		{"DefaultTier missing", Config[string]{Tiers: map[string][]Policy[string]{"free": {pol("a")}}, Tier: tier}, `test: DefaultTier "" is not one of Tiers`},
		{"DefaultTier unknown", Config[string]{Tiers: map[string][]Policy[string]{"free": {pol("a")}}, Tier: tier, DefaultTier: "gold"}, `test: DefaultTier "gold" is not one of Tiers`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Pkg = "test"
			if tc.want != "test: no Limiter" {
				tc.cfg.Limiter = lim
			}
			_, err := New(tc.cfg)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("unexpected error: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// hasRoutes reports whether any route has policies of its own.
func (e *Engine[R]) hasRoutes() bool { return len(e.routes) > 0 }

func TestApplicable(t *testing.T) {
	lim := testLimiter(t)
	e, err := New(Config[string]{Pkg: "test", Limiter: lim,
		Policies: []Policy[string]{pol("base")},
		Routes:   map[string][]Policy[string]{"/r": {pol("route")}},
		Tiers:    map[string][]Policy[string]{"free": {pol("free")}, "pro": {pol("pro"), pol("pro-burst")}},
		Tier:     func(r string) string { return r }, DefaultTier: "free",
	})
	if err != nil {
		t.Fatal(err)
	}
	names := func(ps []*Compiled[string]) []string {
		var out []string
		for _, p := range ps {
			out = append(out, p.Name)
		}
		return out
	}
	route := e.Routes()["/r"]
	for _, tc := range []struct {
		tier  string
		route []*Compiled[string]
		want  [3][]string
	}{
		{"pro", route, [3][]string{{"base"}, {"route"}, {"pro", "pro-burst"}}},
		{"free", nil, [3][]string{{"base"}, nil, {"free"}}},
		{"unknown tier: the default", route, [3][]string{{"base"}, {"route"}, {"free"}}},
	} {
		sets := e.Applicable(tc.tier, tc.route)
		for i := range sets {
			if got := names(sets[i]); !slices.Equal(got, tc.want[i]) {
				t.Errorf("tier %q: set %d = %v, want %v", tc.tier, i, got, tc.want[i])
			}
		}
	}
	if got := len(e.All()); got != 5 {
		t.Errorf("All has %d policies, want 5", got)
	}
	if !e.hasRoutes() || e.HasPerMessage() {
		t.Errorf("hasRoutes %v HasPerMessage %v", e.hasRoutes(), e.HasPerMessage())
	}
}

func TestDecisionViolated(t *testing.T) {
	a, _ := compile("test", pol("a"), "")
	b, _ := compile("test", pol("b"), "")
	c, _ := compile("test", pol("c"), "")
	d := Decision[string]{Outcomes: []Outcome[string]{
		{P: a, Denied: true}, {P: b, Denied: true, Shadow: true}, {P: c},
	}}
	if got := d.Violated(); !slices.Equal(got, []string{"a"}) {
		t.Errorf("Violated = %v, want [a]: shadow and admitted policies are not violated", got)
	}
	if !d.AnyDenied() {
		t.Error("AnyDenied = false")
	}
	d.Outcomes[0].Denied = false
	if got := d.Violated(); got != nil {
		t.Errorf("Violated = %v, want none", got)
	}
	if !d.AnyDenied() {
		t.Error("a shadow denial is a denial for AnyDenied")
	}
	d.Denied, d.Wait = true, 3
	d.Reset()
	if len(d.Outcomes) != 0 || d.Denied || d.Wait != 0 || cap(d.Outcomes) < 3 {
		t.Errorf("Reset left %+v (cap %d)", d, cap(d.Outcomes))
	}
}
