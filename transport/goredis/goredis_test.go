package goredis_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice/internal/redisserver"
	"github.com/sluice-go/sluice/runtime/luart"
	"github.com/sluice-go/sluice/scripts"
	"github.com/sluice-go/sluice/transport/goredis"
)

// testCtx bounds a test's calls generously: a loaded machine is slow, not
// broken.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// newClient is a go-redis client of s speaking protocol (2 or 3) that
// never resends a command.
func newClient(t *testing.T, addr string, protocol int) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, Protocol: protocol, MaxRetries: -1, ReadTimeout: -1, WriteTimeout: -1})
	t.Cleanup(func() { c.Close() })
	return c
}

func newRueidis(t *testing.T, addrs ...string) rueidis.Client {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func ptr[T any](v T) *T { return &v }

// commandCalls is INFO commandstats' call count of cmd on s.
func commandCalls(t *testing.T, s *redisserver.Server, cmd string) int {
	t.Helper()
	info, err := s.Command("INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":calls="); ok {
			var n int
			fmt.Sscan(strings.SplitN(rest, ",", 2)[0], &n)
			return n
		}
	}
	return 0
}

// TestSameRepliesAsRueidis runs the same calls of gcra (four-number
// reply) and gcra_multi (a list reply) through go-redis, under RESP2 and
// RESP3, and through rueidis, on keys of their own on one server: every
// decoded result is the same.
func TestSameRepliesAsRueidis(t *testing.T) {
	s := redisserver.Start(t)
	ctx := testCtx(t)
	rc := newRueidis(t, s.Addr)
	for _, protocol := range []int{2, 3} {
		t.Run(fmt.Sprintf("RESP%d", protocol), func(t *testing.T) {
			gc := newClient(t, s.Addr, protocol)
			now := int64(1_764_590_000_000_000)
			for i := range 14 {
				now += 37_000 // a client clock: both sides decide at the same moments
				cost := int64(1 + i%3)
				call := func(id string) luart.Call {
					return scripts.GCRA.Call(scripts.GCRAKeys{State: fmt.Sprintf("gcra:{%s-%d}", id, protocol)},
						scripts.GCRAArgs{Limit: 10, Period: time.Second.Microseconds(), Burst: 5, Cost: cost, Now: &now})
				}
				want, err := scripts.GCRA.Decode(luart.Do(ctx, rc, call("rueidis")))
				if err != nil {
					t.Fatal(err)
				}
				got, err := scripts.GCRA.DecodeReply(goredis.Do(ctx, gc, call("goredis")))
				if err != nil {
					t.Fatal(err)
				}
				if got != want {
					t.Fatalf("call %d: go-redis decoded %+v, rueidis %+v", i, got, want)
				}
				multi := func(id string) luart.Call {
					return scripts.GCRAMulti.Call(scripts.GCRAMultiKeys{States: []string{
						fmt.Sprintf("m:{%s-%d}:a", id, protocol), fmt.Sprintf("m:{%s-%d}:b", id, protocol)}},
						scripts.GCRAMultiArgs{Cost: cost, Now: &now, Each: ptr(true), Limits: []int64{10, 1_000_000, 5, 20, 1_000_000, 3}})
				}
				wantM, err := scripts.GCRAMulti.Decode(luart.Do(ctx, rc, multi("rueidis")))
				if err != nil {
					t.Fatal(err)
				}
				gotM, err := scripts.GCRAMulti.DecodeReply(goredis.Exec(ctx, gc, multi("goredis"))[0])
				if err != nil {
					t.Fatal(err)
				}
				if fmt.Sprint(gotM) != fmt.Sprint(wantM) {
					t.Fatalf("call %d: gcra_multi through go-redis %+v, through rueidis %+v", i, gotM, wantM)
				}
				if len(gotM.PerLimit) != 6 {
					t.Fatalf("call %d: gcra_multi's list reply has %d numbers, want 6 (3 per limit)", i, len(gotM.PerLimit))
				}
			}
		})
	}
}

// TestNoScript: after SCRIPT FLUSH, Do and Exec send each call once more
// as EVAL, in one more round trip for Exec, and the scripts are loaded
// again.
func TestNoScript(t *testing.T) {
	s := redisserver.Start(t)
	ctx := testCtx(t)
	gc := newClient(t, s.Addr, 3)
	call := func(id string) luart.Call {
		return scripts.FixedWindow.Call(scripts.FixedWindowKeys{State: "fw:{" + id + "}"},
			scripts.FixedWindowArgs{Limit: 3, Period: time.Hour.Microseconds(), Cost: 1})
	}
	if _, err := s.Command("SCRIPT", "FLUSH"); err != nil {
		t.Fatal(err)
	}
	if res, err := scripts.FixedWindow.DecodeReply(goredis.Do(ctx, gc, call("one"))); err != nil || !res.Allowed || res.Remaining != 2 {
		t.Fatalf("Do after SCRIPT FLUSH: %+v, %v; want allowed with 2 remaining", res, err)
	}
	if n := commandCalls(t, s, "eval"); n != 1 {
		t.Fatalf("Do after SCRIPT FLUSH sent %d EVAL, want 1", n)
	}
	if _, err := s.Command("SCRIPT", "FLUSH"); err != nil {
		t.Fatal(err)
	}
	calls := []luart.Call{call("a"), call("b"), call("a"), {}, call("a"), call("a")}
	replies := goredis.Exec(ctx, gc, calls...)
	if len(replies) != len(calls) {
		t.Fatalf("Exec returned %d replies for %d calls", len(replies), len(calls))
	}
	want := []string{"true 2", "true 2", "true 1", "", "true 0", "false 0"}
	for i, r := range replies {
		if calls[i].Script == nil {
			if !errors.Is(r.Err(), luart.ErrNilScript) {
				t.Errorf("reply %d of a call without a script: %v, want luart.ErrNilScript", i, r.Err())
			}
			continue
		}
		res, err := scripts.FixedWindow.DecodeReply(r)
		if err != nil {
			t.Fatalf("reply %d: %v", i, err)
		}
		if got := fmt.Sprint(res.Allowed, res.Remaining); got != want[i] {
			t.Errorf("reply %d: allowed, remaining = %s, want %s", i, got, want[i])
		}
	}
	// The second EVAL round trip held the 5 calls the flush made unknown.
	if n := commandCalls(t, s, "eval"); n != 1+5 {
		t.Errorf("%d EVAL in all, want 6 (1 from Do, 5 from Exec)", n)
	}
	// Loaded again: the next call is one EVALSHA.
	before := commandCalls(t, s, "eval")
	goredis.Do(ctx, gc, call("c"))
	if n := commandCalls(t, s, "eval"); n != before {
		t.Errorf("a call after the reload sent EVAL again")
	}
}

// TestErrors: a refused argument is the script's error reply, as a
// *luart.Error naming the script and holding go-redis' redis.Error; a
// reply of the wrong shape is luart.ErrMalformedReply naming the element;
// a client that cannot reach the server fails, and does not panic.
func TestErrors(t *testing.T) {
	s := redisserver.Start(t)
	ctx := testCtx(t)
	gc := newClient(t, s.Addr, 3)
	_, err := scripts.GCRA.DecodeReply(goredis.Do(ctx, gc, scripts.GCRA.Call(scripts.GCRAKeys{State: "g:{x}"},
		scripts.GCRAArgs{Limit: 0, Period: 1_000_000, Burst: 1, Cost: 1})))
	var le *luart.Error
	var re redis.Error
	if !errors.As(err, &le) || le.Script != "gcra" || !errors.As(err, &re) || !strings.Contains(err.Error(), "limit must be between 1 and") {
		t.Fatalf("limit 0: %v; want a *luart.Error of gcra holding the server's redis.Error on the limit", err)
	}

	src := "return 'x'"
	sum := sha1.Sum([]byte(src))
	odd := &luart.Script{Name: "odd", Source: src, SHA1: hex.EncodeToString(sum[:]), ReadOnly: true}
	d := luart.NewReplyDecoder(odd, goredis.Do(ctx, gc, luart.Call{Script: odd, Keys: []string{"k"}}), 2)
	if err := d.Err(); !errors.Is(err, luart.ErrMalformedReply) || !strings.Contains(err.Error(), `want an array of 2 elements, got string "x"`) {
		t.Fatalf("a string decoded as two elements: %v", err)
	}
	if n := commandCalls(t, s, "eval_ro"); n != 1 {
		t.Errorf("the read-only script went as %d EVAL_RO, want 1", n)
	}

	dead := newClient(t, "127.0.0.1:1", 3)
	if r := goredis.Do(ctx, dead, scripts.GCRA.Call(scripts.GCRAKeys{State: "g:{x}"}, scripts.GCRAArgs{Limit: 1, Period: 1, Burst: 1, Cost: 1})); r.Err() == nil {
		t.Fatal("a call to a closed port succeeded")
	}
	if r := goredis.Exec(ctx, dead, scripts.GCRA.Call(scripts.GCRAKeys{State: "g:{x}"}, scripts.GCRAArgs{Limit: 1, Period: 1, Burst: 1, Cost: 1})); r[0].Err() == nil {
		t.Fatal("a batch to a closed port succeeded")
	}
}

// TestCluster: on a 3-master cluster Load puts the scripts on every
// master, and one Exec of calls on many identities (every node's slots)
// decides each on its own node, exactly: a burst of 2 admits 2 calls per
// identity over 3 batches.
func TestCluster(t *testing.T) {
	cl := redisserver.StartCluster(t, 3)
	ctx := testCtx(t)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), MaxRetries: -1, ReadTimeout: -1, WriteTimeout: -1})
	t.Cleanup(func() { cc.Close() })
	if err := goredis.Load(ctx, cc, &scripts.GCRA.Script, &scripts.GCRAMulti.Script); err != nil {
		t.Fatal(err)
	}
	for _, n := range cl.Nodes {
		got, err := n.Command("SCRIPT", "EXISTS", scripts.GCRA.SHA1, scripts.GCRAMulti.SHA1)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Count(got, "1") != 2 {
			t.Errorf("SCRIPT EXISTS on %s: %q, want both scripts loaded", n.Addr, got)
		}
	}
	const ids = 60
	admitted := map[string]int{}
	for range 3 {
		calls := make([]luart.Call, ids)
		for i := range calls {
			calls[i] = scripts.GCRA.Call(scripts.GCRAKeys{State: fmt.Sprintf("c:{user-%d}", i)},
				scripts.GCRAArgs{Limit: 1, Period: time.Hour.Microseconds(), Burst: 2, Cost: 1})
		}
		for i, r := range goredis.Exec(ctx, cc, calls...) {
			res, err := scripts.GCRA.DecodeReply(r)
			if err != nil {
				t.Fatalf("identity %d: %v", i, err)
			}
			if res.Allowed {
				admitted[calls[i].Keys[0]]++
			}
		}
	}
	for i := range ids {
		if n := admitted[fmt.Sprintf("c:{user-%d}", i)]; n != 2 {
			t.Errorf("identity %d: %d of 3 calls admitted, want 2", i, n)
		}
	}
	var used int
	for _, n := range cl.Nodes {
		if commandCalls(t, n, "evalsha") > 0 {
			used++
		}
	}
	if used != len(cl.Nodes) {
		t.Errorf("the calls reached %d of %d masters", used, len(cl.Nodes))
	}
}
