package policyfile_test

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adapters/httplimit"
	"github.com/sluice-go/sluice/policyfile"
)

// exampleFiles are the example files every file test reads: testdata's
// and the server example's.
func exampleFiles(t testing.TB) []string {
	t.Helper()
	files, err := filepath.Glob("testdata/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	json, _ := filepath.Glob("testdata/*.json")
	files = append(files, json...)
	files = append(files, filepath.Join("..", "examples", "server", "policies.yaml"))
	if len(files) < 4 {
		t.Fatalf("example files: %v", files)
	}
	return files
}

// roundTrip checks that c written out and read again is c.
func roundTrip(t *testing.T, c *policyfile.Config) {
	t.Helper()
	out, err := policyfile.Marshal(c)
	if err != nil {
		t.Fatalf("Marshal: %v", err)
	}
	back, err := policyfile.Parse("out.yaml", out)
	if err != nil {
		t.Fatalf("Parse(Marshal(c)): %v\n%s", err, out)
	}
	if !policyfile.Equal(c, back) {
		t.Errorf("Parse(Marshal(c)) differs from c:\n%s", out)
	}
	again, err := policyfile.Marshal(back)
	if err != nil {
		t.Fatal(err)
	}
	if string(again) != string(out) {
		t.Errorf("Marshal is not stable:\n%s\nthen\n%s", out, again)
	}
}

func TestExamplesParseAndRoundTrip(t *testing.T) {
	for _, f := range exampleFiles(t) {
		t.Run(filepath.Base(f), func(t *testing.T) {
			c, err := policyfile.Load(f)
			if err != nil {
				t.Fatal(err)
			}
			if c.Version == "" || c.File != f {
				t.Errorf("Version %q, File %q", c.Version, c.File)
			}
			roundTrip(t, c)
			if c.Methods == nil { // the gRPC one is converted by adapters/grpc's tests
				if _, err := httplimit.FromFile(c, nil); err != nil {
					t.Errorf("httplimit.FromFile: %v", err)
				}
			}
		})
	}
}

// Equal is reflect.DeepEqual once the derived fields are cleared.
func TestEqualIsDeepEqualButDerived(t *testing.T) {
	a, err := policyfile.Load("testdata/http.yaml")
	if err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile("testdata/http.yaml")
	b, err := policyfile.Parse("elsewhere.yaml", append([]byte("\n\n"), data...))
	if err != nil {
		t.Fatal(err)
	}
	if !policyfile.Equal(a, b) {
		t.Fatal("the same file at other positions is not Equal")
	}
	clear := func(c *policyfile.Config) {
		c.File, c.Pos = "", nil
		var walk func(v reflect.Value)
		walk = func(v reflect.Value) {
			switch v.Kind() {
			case reflect.Pointer:
				if !v.IsNil() {
					walk(v.Elem())
				}
			case reflect.Struct:
				for i := range v.NumField() {
					if v.Field(i).Type() == reflect.TypeFor[policyfile.Pos]() {
						v.Field(i).SetZero()
					} else {
						walk(v.Field(i))
					}
				}
			case reflect.Slice:
				for i := range v.Len() {
					walk(v.Index(i))
				}
			case reflect.Map:
				for it := v.MapRange(); it.Next(); {
					e := reflect.New(it.Value().Type()).Elem()
					e.Set(it.Value())
					walk(e)
					v.SetMapIndex(it.Key(), e)
				}
			}
		}
		walk(reflect.ValueOf(c))
	}
	clear(a)
	clear(b)
	if !reflect.DeepEqual(a, b) {
		t.Error("Equal configs differ once the derived fields are cleared")
	}
	b.Tiers.Table["key:x"] = "pro"
	if policyfile.Equal(a, b) {
		t.Error("Equal ignores a table entry")
	}
}

func TestVersion(t *testing.T) {
	src := "policies: [{name: p, limit: {algorithm: gcra, rate: 1, period: 1s}, key: ip}]\n"
	a, err := policyfile.Parse("a.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := policyfile.Parse("a.yaml", []byte(src+"# changed\n"))
	if len(a.Version) != len("sha256:")+16 || a.Version == b.Version {
		t.Errorf("content versions %q and %q", a.Version, b.Version)
	}
	c, _ := policyfile.Parse("a.yaml", []byte("version: 7\n"+src))
	if c.Version != "7" {
		t.Errorf("version = %q, want 7", c.Version)
	}
}

func TestLimits(t *testing.T) {
	c, err := policyfile.Parse("l.yaml", []byte(`
policies:
  - {name: g, limit: {algorithm: gcra, rate: 10, period: 1m}, key: ip}
  - {name: t, limit: {algorithm: token_bucket, rate: 10, period: 1m, burst: 3, name: shared}, key: ip}
  - {name: f, limit: {algorithm: fixed_window, rate: 10, period: 1h30m}, key: ip}
  - {name: w, limit: {algorithm: sliding_window, rate: 10, period: 1s}, key: ip}
  - {name: s, limit: {algorithm: sliding_log, rate: 10, period: 500ms}, key: ip}
  - {name: c, limit: {algorithm: concurrency, rate: 4, lease: 30s}, key: ip}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := []sluice.Limit{
		sluice.Must(sluice.GCRA(10, time.Minute, 10)).Named("g"),
		sluice.Must(sluice.TokenBucket(10, time.Minute, 3)).Named("shared"),
		sluice.Must(sluice.FixedWindow(10, 90*time.Minute)).Named("f"),
		sluice.Must(sluice.SlidingWindow(10, time.Second)).Named("w"),
		sluice.Must(sluice.SlidingLog(10, 500*time.Millisecond)).Named("s"),
		sluice.Must(sluice.Concurrency(4, 30*time.Second)).Named("c"),
	}
	for i, p := range c.Policies {
		got, err := p.SluiceLimit()
		if err != nil || got != want[i] {
			t.Errorf("policy %s: %+v, %v; want %+v", p.Name, got, err, want[i])
		}
	}
}

func TestLimiterOptions(t *testing.T) {
	c, err := policyfile.Parse("l.yaml", []byte(`
limiter: {failure: open, timeout: 50ms}
policies: [{name: p, limit: {algorithm: gcra, rate: 1, period: 1s}, key: ip}]`))
	if err != nil {
		t.Fatal(err)
	}
	if l := c.Limiter; l.Failure != "open" || l.Timeout != 50*time.Millisecond || len(c.LimiterOptions()) != 2 {
		t.Errorf("limiter %+v, %d options", l, len(c.LimiterOptions()))
	}
	// the options are sluice's: a Limiter takes them
	mr := miniredis.RunT(t)
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{mr.Addr()}, DisableCache: true, ForceSingleClient: true})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	lim, err := sluice.New(client, c.LimiterOptions()...)
	if err != nil {
		t.Fatalf("sluice refuses the options: %v", err)
	}
	lim.Close()
	if (&policyfile.Config{}).LimiterOptions() != nil {
		t.Error("options without a limiter section")
	}
}

func TestCostFromRequest(t *testing.T) {
	c := &policyfile.Cost{Header: "X-Items", Default: 2, Max: 10}
	for v, want := range map[string]int64{"3": 3, " 4 ": 4, "0": 2, "-1": 2, "x": 2, "1e3": 2, "11": 10, "99999999999999999999": 2, "": 2} {
		if got := c.FromRequest(v, v != ""); got != want {
			t.Errorf("cost of %q = %d, want %d", v, got, want)
		}
	}
	if got := (&policyfile.Cost{Value: 7}).FromRequest("3", true); got != 7 {
		t.Errorf("constant cost = %d", got)
	}
	if got := (&policyfile.Cost{Header: "h", Default: 1}).FromRequest("999999999999999999", true); got != sluice.MaxCost {
		t.Errorf("uncapped cost = %d, want MaxCost", got)
	}
}

func TestMerges(t *testing.T) {
	_, err := policyfile.Parse("m.yaml", []byte(`
x-limits:
policies:
  - name: a
    limit: &std {algorithm: gcra, rate: 10, period: 1m, burst: 5}
    key: ip
  - name: b
    limit: {<<: *std, rate: 20}
    key: ip
`))
	if err == nil || !strings.Contains(err.Error(), `unknown field "x-limits"`) {
		t.Fatalf("want the unknown field reported, got %v", err)
	}
	c, err := policyfile.Parse("m.yaml", []byte(`
policies:
  - name: a
    limit: &std {algorithm: gcra, rate: 10, period: 1m, burst: 5}
    key: ip
  - name: b
    limit: {<<: *std, rate: 20}
    key: ip
`))
	if err != nil {
		t.Fatal(err)
	}
	if l := c.Policies[1].Limit; l.Rate != 20 || l.Burst != 5 || l.Period != time.Minute {
		t.Errorf("merged limit %+v", l)
	}
}

func TestErrorsType(t *testing.T) {
	_, err := policyfile.Parse("e.yaml", []byte("policies: 3\n"))
	var es policyfile.Errors
	var e policyfile.Error
	if !errors.As(err, &es) || !errors.As(err, &e) || e.Line != 1 || e.Col != 11 || e.File != "e.yaml" {
		t.Errorf("error %#v", err)
	}
	if err.Error() != "e.yaml:1:11: policies: want a list, got integer 3" {
		t.Errorf("Error() = %q", err)
	}
}
