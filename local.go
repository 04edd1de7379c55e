package sluice

import (
	"hash/maphash"
	"slices"
	"sync"
	"time"
)

// localShards is the number of independently locked parts of the local
// fallback: degraded decisions on different identities rarely share a lock.
const localShards = 64

// defaultLocalEntries bounds the local fallback by default: 2^20 states.
const defaultLocalEntries = 1 << 20

// localFallback is the in-process quota used by the FailLocal policy while
// Redis cannot decide. Each replica admits its share of every limit
// (Rate/replicas per Period, burst likewise, at least 1) with a GCRA kept in
// memory, so the fleet as a whole stays near the configured quota without
// any shared state. Concurrency limits count this process's holders only,
// and each local lease expires after the limit's Period like a Redis one.
//
// Memory is bounded: each shard keeps at most perShard states, by the
// 64-bit hash of their key (two keys whose hashes collide share one state,
// which only ever admits less). A shard that is full first drops states
// that have expired (nothing to remember); failing that, the one of a few
// sampled that is closest to empty, and raises the shard's floor to it: a
// key not found starts at the floor, so a dropped identity seen again is
// never fresher than it was, and no limit is exceeded because of the bound.
type localFallback struct {
	replicas int64
	perShard int
	seed     maphash.Seed
	shards   [localShards]localShard
}

type localShard struct {
	mu      sync.Mutex
	tat     map[uint64]int64 // GCRA theoretical arrival time (UnixNano, the Limiter's clock) by key hash
	floor   int64            // the latest future TAT dropped to keep the bound: the TAT of keys not found
	leases  map[uint64]map[string]int64
	holders int // leases held in this shard
}

func newLocalFallback(replicas, entries int) *localFallback {
	if entries <= 0 {
		entries = defaultLocalEntries
	}
	f := &localFallback{replicas: int64(max(replicas, 1)), perShard: max(entries/localShards, 1), seed: maphash.MakeSeed()}
	for i := range f.shards {
		f.shards[i].tat = map[uint64]int64{}
		f.shards[i].leases = map[uint64]map[string]int64{}
	}
	return f
}

// share is this replica's part of n, at least 1.
func (f *localFallback) share(n int64) int64 {
	return max(n/f.replicas, 1)
}

// gcraOf is the local GCRA standing in for lim: emission interval and
// tolerance (burst × interval).
func (f *localFallback) gcraOf(lim Limit) (interval, tolerance time.Duration, burst int64) {
	rate := f.share(lim.Rate)
	burst = rate
	if lim.Algorithm == AlgTokenBucket || lim.Algorithm == AlgGCRA {
		burst = f.share(lim.Burst)
	}
	interval = max(lim.Period/time.Duration(rate), 1)
	return interval, interval * time.Duration(burst), burst
}

func (f *localFallback) hash(key string) (uint64, *localShard) {
	h := maphash.String(f.seed, key)
	return h, &f.shards[h%localShards]
}

// lock locks the shards of hashes in ascending order (each once) and
// returns the unlock.
func (f *localFallback) lock(hashes []uint64) func() {
	var buf [16]int
	idx := buf[:0]
	for _, h := range hashes {
		idx = append(idx, int(h%localShards))
	}
	slices.Sort(idx)
	idx = slices.Compact(idx)
	for _, i := range idx {
		f.shards[i].mu.Lock()
	}
	return func() {
		for _, i := range idx {
			f.shards[i].mu.Unlock()
		}
	}
}

// decide admits cost against every limit, each under its key, or against
// none (all-or-nothing, like AllowAll in Redis). With peek it charges
// nothing and reports what the decision would be. The Result is the
// binding limit's: the one denying with the longest wait (RetryNever
// first), or when allowed the one with the least remaining.
func (f *localFallback) decide(keys []string, lims []Limit, cost int64, peek bool, now time.Time, _ *breaker) Result {
	var hbuf [16]uint64
	var tbuf [16]time.Time
	hashes, tats := hbuf[:0], tbuf[:0]
	for _, k := range keys {
		h, _ := f.hash(k)
		hashes = append(hashes, h)
	}
	unlock := f.lock(hashes)
	defer unlock()
	var bind Result
	allowed := true
	for i, lim := range lims {
		interval, tolerance, burst := f.gcraOf(lim)
		tat := f.shards[hashes[i]%localShards].get(hashes[i])
		if tat.Before(now) {
			tat = now
		}
		tats = append(tats, tat)
		r := Result{Limit: lim, Degraded: true, Allowed: true}
		switch {
		case cost > burst:
			r.Allowed, r.RetryAfter = false, RetryNever
		default:
			if wait := tat.Add(interval*time.Duration(cost)).Sub(now) - tolerance; wait > 0 {
				r.Allowed, r.RetryAfter = false, max(ceilMicros(wait), time.Microsecond)
			}
		}
		if !r.Allowed {
			r.Remaining = remainingAt(tat, now, tolerance, interval)
			r.ResetAfter = ceilMicros(tat.Sub(now))
			if allowed || r.RetryAfter == RetryNever && bind.RetryAfter != RetryNever || bind.RetryAfter != RetryNever && r.RetryAfter > bind.RetryAfter {
				bind = r
			}
			allowed = false
		}
	}
	if !allowed {
		return bind
	}
	for i, lim := range lims {
		interval, tolerance, _ := f.gcraOf(lim)
		tat := tats[i].Add(interval * time.Duration(cost))
		if cost > 0 && !peek {
			f.shards[hashes[i]%localShards].put(hashes[i], tat.UnixNano(), now.UnixNano(), f.perShard)
		}
		r := Result{Allowed: true, Limit: lim, Degraded: true,
			Remaining: remainingAt(tat, now, tolerance, interval), ResetAfter: ceilMicros(tat.Sub(now))}
		if i == 0 || r.Remaining < bind.Remaining {
			bind = r
		}
	}
	return bind
}

// reserve books cost of lim locally at the first moment it conforms, if
// that is at most maxWait from now (Reserve and Wait under FailLocal);
// false and the wait it would need otherwise (RetryNever when cost exceeds
// this replica's burst).
func (f *localFallback) reserve(key string, lim Limit, cost int64, maxWait time.Duration, now time.Time, _ *breaker) (ok bool, delay time.Duration, closed bool) {
	interval, tolerance, burst := f.gcraOf(lim)
	if cost > burst {
		return false, RetryNever, false
	}
	h, s := f.hash(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	tat := s.get(h)
	if tat.Before(now) {
		tat = now
	}
	wait := max(ceilMicros(tat.Add(interval*time.Duration(cost)).Sub(now)-tolerance), 0)
	if wait > maxWait {
		return false, wait, false
	}
	s.put(h, tat.Add(interval*time.Duration(cost)).UnixNano(), now.UnixNano(), f.perShard)
	return true, wait, false
}

// unreserve gives back a local reservation of cost that conforms at at
// and has not yet (Reservation.Cancel): its emission, but never below now.
func (f *localFallback) unreserve(key string, lim Limit, cost int64, at, now time.Time) {
	if !now.Before(at) {
		return
	}
	interval, _, _ := f.gcraOf(lim)
	h, s := f.hash(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, ok := s.tat[h]; ok {
		s.tat[h] = max(t-int64(interval)*cost, now.UnixNano())
	}
}

// get is the TAT of h: its own, or the shard's floor when it has none.
func (s *localShard) get(h uint64) time.Time {
	if t, ok := s.tat[h]; ok {
		return time.Unix(0, t)
	}
	return time.Unix(0, s.floor)
}

// put stores h's TAT, making room within the bound first.
func (s *localShard) put(h uint64, tat, now int64, bound int) {
	if _, ok := s.tat[h]; !ok && len(s.tat) >= bound {
		s.evict(now)
	}
	s.tat[h] = tat
}

// evict drops the expired states among a few (map order is random), or
// else the sampled state nearest to empty, raising the floor to its TAT.
func (s *localShard) evict(now int64) {
	const sample = 8
	var victim uint64
	least, seen, dropped := int64(0), 0, false
	for h, t := range s.tat {
		if t <= now {
			delete(s.tat, h)
			dropped = true
		} else if seen == 0 || t < least {
			victim, least = h, t
		}
		if seen++; seen >= sample {
			break
		}
	}
	if dropped || seen == 0 {
		return
	}
	delete(s.tat, victim)
	s.floor = max(s.floor, least)
}

func remainingAt(tat, now time.Time, tolerance, interval time.Duration) int64 {
	free := tolerance - tat.Sub(now)
	if free < 0 {
		return 0
	}
	return int64(free / interval)
}

// acquire takes (or, for a holder that has one, renews) a local
// concurrency slot for id until now + lim.Period. A shard holding its bound
// of leases takes no new holder: the request is denied, which keeps the
// limit.
func (f *localFallback) acquire(key, id string, lim Limit, now time.Time, _ *breaker) Result {
	n := f.share(lim.Rate)
	h, s := f.hash(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	held := s.live(h, now.UnixNano())
	res := Result{Limit: lim, Degraded: true}
	_, mine := held[id]
	if !mine && (int64(len(held)) >= n || s.holders >= f.perShard) {
		first := now.Add(time.Second).UnixNano() // a full shard with no holder here: try again in 1s
		if len(held) > 0 {
			first = 0
			for _, exp := range held {
				if first == 0 || exp < first {
					first = exp
				}
			}
		}
		res.RetryAfter = max(ceilMicros(time.Unix(0, first).Sub(now)), time.Microsecond)
		res.ResetAfter = max(ceilMicros(time.Unix(0, lastExpiry(held)).Sub(now)), 0)
		return res
	}
	if held == nil {
		held = map[string]int64{}
		s.leases[h] = held
	}
	if !mine {
		s.holders++
	}
	held[id] = now.Add(lim.Period).UnixNano()
	res.Allowed = true
	res.Remaining = n - int64(len(held))
	res.ResetAfter = ceilMicros(time.Unix(0, lastExpiry(held)).Sub(now))
	return res
}

// release gives a local concurrency slot back.
func (f *localFallback) release(key, id string) {
	h, s := f.hash(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if held := s.leases[h]; held != nil {
		if _, ok := held[id]; ok {
			delete(held, id)
			s.holders--
		}
		if len(held) == 0 {
			delete(s.leases, h)
		}
	}
}

// live returns h's holders after dropping expired leases.
func (s *localShard) live(h uint64, now int64) map[string]int64 {
	held := s.leases[h]
	for id, exp := range held {
		if exp <= now {
			delete(held, id)
			s.holders--
		}
	}
	if held != nil && len(held) == 0 {
		delete(s.leases, h)
		return nil
	}
	return held
}

func lastExpiry(held map[string]int64) int64 {
	var last int64
	for _, exp := range held {
		last = max(last, exp)
	}
	return last
}

// forget drops key's local state (Reset).
func (f *localFallback) forget(key string) {
	h, s := f.hash(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.tat, h)
	s.holders -= len(s.leases[h])
	delete(s.leases, h)
}
