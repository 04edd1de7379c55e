package sluice

import (
	"context"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"
)

// The local fallback keeps at most its bound of states, and dropping one
// never gives its identity a fresh quota: an identity that spent its share
// and was pushed out by thousands of others is still denied when it comes
// back.
func TestLocalFallbackBound(t *testing.T) {
	f := newLocalFallback(1, localShards) // one state per shard
	lim := Must(GCRA(10, time.Hour, 10))
	now := time.Unix(1_800_000_000, 0)
	key := func(id string) []string { return []string{key("p", id, lim.Name)} }
	for i := range 10 {
		if r := f.decide(key("spender"), []Limit{lim}, 1, false, now, nil); !r.Allowed {
			t.Fatalf("call %d of the spender: %+v", i, r)
		}
	}
	if r := f.decide(key("spender"), []Limit{lim}, 1, false, now, nil); r.Allowed {
		t.Fatalf("11th call: %+v; want denied", r)
	}
	admitted := 0
	for i := range 10_000 {
		if r := f.decide(key("other-"+strconv.Itoa(i)), []Limit{lim}, 1, false, now, nil); r.Allowed {
			admitted++
		}
		if states, _ := f.size(); states > localShards {
			t.Fatalf("after %d identities: %d states, bound %d", i+1, states, localShards)
		}
	}
	if r := f.decide(key("spender"), []Limit{lim}, 1, false, now, nil); r.Allowed {
		t.Fatalf("the spender after being pushed out: %+v; want still denied", r)
	}
	t.Logf("10,000 other identities: %d admitted at once (a shard's floor holds back those that follow a dropped state)", admitted)
	// Time passing frees everyone: a state that has expired is dropped first.
	later := now.Add(2 * time.Hour)
	if r := f.decide(key("spender"), []Limit{lim}, 1, false, later, nil); !r.Allowed {
		t.Fatalf("two hours later: %+v", r)
	}
}

// BenchmarkLocalFallbackMemory decides for 10 million distinct identities
// through a Limiter whose Redis is down (FailLocal, the defaults) and
// reports the heap the local fallback holds afterwards: the default bound
// of 2^20 states keeps it under 64 MiB however many identities come.
//
//	go test -run '^$' -bench BenchmarkLocalFallbackMemory -benchtime 1x .
func BenchmarkLocalFallbackMemory(b *testing.B) {
	const ids = 10_000_000
	lim := Must(GCRA(100, time.Hour, 100))
	for b.Loop() {
		m := miniredis.RunT(b)
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{m.Addr()}, DisableCache: true, ForceSingleClient: true})
		if err != nil {
			b.Fatal(err)
		}
		fc := &failingClient{Client: c}
		l, err := New(fc, WithLogger(nil), WithBreaker(1, time.Hour), WithDenialCache(0))
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		l.Allow(ctx, "open-the-breaker", lim)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for i := range ids {
			if r, err := l.Allow(ctx, "id-"+strconv.Itoa(i), lim); err != nil || !r.Degraded {
				b.Fatalf("identity %d: %+v, %v", i, r, err)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		states, _ := l.e.policy.(*localFallback).size()
		b.ReportMetric(float64(after.HeapInuse-before.HeapInuse)/(1<<20), "MiB")
		b.ReportMetric(float64(states), "states")
		runtime.KeepAlive(l)
		l.Close()
		c.Close()
	}
}

// size is the number of states and leases f holds.
func (f *localFallback) size() (states, leases int) {
	for i := range f.shards {
		s := &f.shards[i]
		s.mu.Lock()
		states += len(s.tat)
		leases += s.holders
		s.mu.Unlock()
	}
	return states, leases
}
