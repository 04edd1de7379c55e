package scripts_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice/internal/redisserver"
	"github.com/sluice-go/sluice/runtime/luart"
	"github.com/sluice-go/sluice/scripts"
)

// builtins lists every generated script of this package.
var builtins = []*luart.Script{
	&scripts.FixedWindow.Script,
	&scripts.FixedWindowMulti.Script,
	&scripts.SlidingLog.Script,
	&scripts.SlidingWindow.Script,
	&scripts.SlidingWindowMulti.Script,
	&scripts.TokenBucket.Script,
	&scripts.GCRA.Script,
	&scripts.GCRAMulti.Script,
	&scripts.ConcurrencyAcquire.Script,
	&scripts.ConcurrencyRelease.Script,
	&scripts.Refund.Script,
	&scripts.GCRAReserve.Script,
	&scripts.GCRACancel.Script,
	&scripts.GCRAReserveMulti.Script,
	&scripts.TokenBucketReserve.Script,
	&scripts.TokenBucketCancel.Script,
}

// TestBuiltinsListed keeps builtins in step with the .lua files.
func TestBuiltinsListed(t *testing.T) {
	files, _ := filepath.Glob("*.lua")
	if len(files) != len(builtins) {
		t.Fatalf("%d .lua files but %d scripts in builtins; add the new script to the list", len(files), len(builtins))
	}
	for _, s := range builtins {
		src, err := os.ReadFile(s.Name + ".lua")
		if err != nil {
			t.Fatalf("script %q: %v", s.Name, err)
		}
		if string(src) != s.Source {
			t.Fatalf("%s.lua differs from the embedded source; run go generate", s.Name)
		}
		// `redis-cli SCRIPT LOAD "$(cat X.lua)"` drops trailing newlines, so
		// the built-in files end without one and that command prints the
		// generated SHA1.
		if strings.HasSuffix(s.Source, "\n") {
			t.Errorf("%s.lua ends with a newline; SCRIPT LOAD \"$(cat %s.lua)\" would print another SHA1", s.Name, s.Name)
		}
	}
}

// counter wraps a client and counts DoMulti round trips and commands.
type counter struct {
	rueidis.CommandClient
	mu       sync.Mutex
	multi    int
	commands []string
}

func (c *counter) DoMulti(ctx context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
	c.mu.Lock()
	c.multi++
	for _, cmd := range cmds {
		c.commands = append(c.commands, cmd.Commands()[0])
	}
	c.mu.Unlock()
	return c.CommandClient.DoMulti(ctx, cmds...)
}

func TestGeneratedScriptsOnRealRedis(t *testing.T) {
	ctx := context.Background()
	srv := redisserver.Start(t)
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()

	t.Run("SHA1 equals SCRIPT LOAD", func(t *testing.T) {
		for _, s := range builtins {
			got, err := srv.Command("SCRIPT", "LOAD", s.Source)
			if err != nil {
				t.Fatalf("%s: SCRIPT LOAD: %v", s.Name, err)
			}
			if got != s.SHA1 {
				t.Errorf("%s: SCRIPT LOAD = %s, generated SHA1 = %s", s.Name, got, s.SHA1)
			}
		}
	})

	now := int64(1_800_000_000_000_000)
	gcra := func(id string) luart.Call {
		return scripts.GCRA.Call(scripts.GCRAKeys{State: "g:{" + id + "}"},
			scripts.GCRAArgs{Limit: 10, Period: 1_000_000, Burst: 10, Cost: 1, Now: &now})
	}

	t.Run("recovers after SCRIPT FLUSH", func(t *testing.T) {
		if _, err := srv.Command("SCRIPT", "FLUSH"); err != nil {
			t.Fatal(err)
		}
		r, err := scripts.GCRA.Run(ctx, client, scripts.GCRAKeys{State: "flush:{a}"},
			scripts.GCRAArgs{Limit: 10, Period: 1_000_000, Burst: 10, Cost: 1, Now: &now})
		if err != nil || !r.Allowed || r.Remaining != 9 {
			t.Fatalf("Run after SCRIPT FLUSH: %+v, %v", r, err)
		}
		again, err := scripts.GCRA.Run(ctx, client, scripts.GCRAKeys{State: "flush:{a}"},
			scripts.GCRAArgs{Limit: 10, Period: 1_000_000, Burst: 10, Cost: 1, Now: &now})
		if err != nil || again.Remaining != 8 {
			t.Fatalf("second Run: %+v, %v", again, err)
		}
	})

	t.Run("1,000 mixed calls in one DoMulti", func(t *testing.T) {
		calls := make([]luart.Call, 0, 1000)
		for i := 0; len(calls) < 1000; i++ {
			id := fmt.Sprintf("user%d", i%97)
			switch i % 5 {
			case 0:
				calls = append(calls, gcra(id))
			case 1:
				calls = append(calls, scripts.FixedWindow.Call(scripts.FixedWindowKeys{State: "f:{" + id + "}"},
					scripts.FixedWindowArgs{Limit: 5, Period: 60_000_000, Cost: 1, Now: &now}))
			case 2:
				calls = append(calls, scripts.SlidingLog.Call(scripts.SlidingLogKeys{Log: "l:{" + id + "}"},
					scripts.SlidingLogArgs{Limit: 5, Period: 60_000_000, Cost: 1, Now: &now}))
			case 3:
				calls = append(calls, scripts.TokenBucket.Call(scripts.TokenBucketKeys{State: "t:{" + id + "}"},
					scripts.TokenBucketArgs{Limit: 5, Period: 60_000_000, Burst: 5, Cost: 1, Now: &now}))
			default:
				calls = append(calls, scripts.ConcurrencyAcquire.Call(scripts.ConcurrencyAcquireKeys{Holders: "c:{" + id + "}"},
					scripts.ConcurrencyAcquireArgs{Limit: 3, Lease: 30_000_000, ID: fmt.Sprint("h", i), Now: &now}))
			}
		}
		if err := luart.Load(ctx, client, builtins...); err != nil {
			t.Fatal(err)
		}
		c := &counter{CommandClient: client}
		res := luart.Exec(ctx, c, calls...)
		if c.multi != 1 || len(c.commands) != 1000 {
			t.Fatalf("%d DoMulti round trips with %d commands; want 1 with 1000", c.multi, len(c.commands))
		}
		for _, name := range c.commands {
			if name != "EVALSHA" {
				t.Fatalf("sent %s; want only EVALSHA once the scripts are loaded", name)
			}
		}
		allowed := 0
		for i, r := range res {
			var ok bool
			var err error
			switch i % 5 {
			case 0:
				var v scripts.GCRAResult
				v, err = scripts.GCRA.Decode(r)
				ok = v.Allowed
			case 1:
				var v scripts.FixedWindowResult
				v, err = scripts.FixedWindow.Decode(r)
				ok = v.Allowed
			case 2:
				var v scripts.SlidingLogResult
				v, err = scripts.SlidingLog.Decode(r)
				ok = v.Allowed
			case 3:
				var v scripts.TokenBucketResult
				v, err = scripts.TokenBucket.Decode(r)
				ok = v.Allowed
			default:
				var v scripts.ConcurrencyAcquireResult
				v, err = scripts.ConcurrencyAcquire.Decode(r)
				ok = v.Allowed
			}
			if err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
			if ok {
				allowed++
			}
		}
		// Each of the 97 identities sees about 2 calls per script, all under
		// the limits except the concurrency limit of 3 (at most 3 per id).
		if allowed < 900 {
			t.Fatalf("only %d of 1000 calls allowed", allowed)
		}

		// After SCRIPT FLUSH the same batch still decodes: NOSCRIPT replies
		// are resent as EVAL in one more round trip.
		if _, err := srv.Command("SCRIPT", "FLUSH"); err != nil {
			t.Fatal(err)
		}
		c = &counter{CommandClient: client}
		for i, r := range luart.Exec(ctx, c, calls[:100]...) {
			if err := r.Error(); err != nil {
				t.Fatalf("call %d after SCRIPT FLUSH: %v", i, err)
			}
		}
		if c.multi != 2 {
			t.Fatalf("%d round trips after SCRIPT FLUSH; want 2 (EVALSHA, then EVAL for all)", c.multi)
		}
	})
}
