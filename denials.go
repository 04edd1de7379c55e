package sluice

import (
	"hash/maphash"
	"sync"
	"time"
)

// denialCache answers, without a round trip, a check of cost 1 (Allow,
// Peek, a batch's check) from an identity that Redis denied a cost of 1 a
// moment ago: until that denial's RetryAfter has passed, the limit cannot
// admit a cost of 1 (a denied request changes nothing, and a limit only
// admits more as time passes), so the answer is a denial with Remaining 0,
// the RetryAfter left and the ResetAfter left; a report (cost 0) meanwhile
// is allowed with Remaining 0. It is how a limiter survives a hot abusive
// identity, also behind several policies: an enforced check it denies
// denies the whole batch with no round trip. Only single-limit denials of
// cost 1 are cached, and only costs 0 and 1 answered; other costs always
// ask Redis. A refund (a denied batch giving back its
// charges) drops this Limiter's entries of the keys it refunds; another
// replica's Reset or refund is not seen until the cached denial runs out
// (it can only deny longer, never admit more).
type denialCache struct {
	seed   maphash.Seed
	shards [denialShards]denialShard
	max    int // entries per shard
}

const denialShards = 32

type denialShard struct {
	mu sync.RWMutex
	m  map[string]denial
}

// denial is one cached answer: Redis said the limit admits a cost of 1 no
// sooner than until, and is empty at reset (both on the Limiter's clock).
type denial struct {
	until, reset time.Time
	retryAt      time.Time // when the reply says a retry passes: never earlier than the truth
	res          Result
}

func newDenialCache(size int) *denialCache {
	c := &denialCache{seed: maphash.MakeSeed(), max: max(size/denialShards, 1)}
	for i := range c.shards {
		c.shards[i].m = map[string]denial{}
	}
	return c
}

func (c *denialCache) shard(key string) *denialShard {
	return &c.shards[maphash.String(c.seed, key)%denialShards]
}

// get returns the cached denial for key at now, if one holds.
func (c *denialCache) get(key string, now time.Time) (Result, bool) {
	if c == nil {
		return Result{}, false
	}
	s := c.shard(key)
	s.mu.RLock()
	d, ok := s.m[key]
	s.mu.RUnlock()
	if !ok || !now.Before(d.until) {
		return Result{}, false
	}
	r := d.res
	r.RetryAfter = max(ceilMicros(d.retryAt.Sub(now)), time.Microsecond)
	r.ResetAfter = max(ceilMicros(d.reset.Sub(now)), 0)
	return r, true
}

// put caches a denial of cost 1 that Redis returned for a call sent at
// sent and answered at answered.
func (c *denialCache) put(key string, res Result, sent, answered time.Time) {
	if c == nil || res.Allowed || res.Degraded || res.RetryAfter <= 0 {
		return
	}
	d := denial{
		until:   sent.Add(res.RetryAfter), // Redis decided after sent: never deny past the real moment
		retryAt: answered.Add(res.RetryAfter),
		reset:   answered.Add(res.ResetAfter),
		res:     res,
	}
	s := c.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.m[key]; !ok && len(s.m) >= c.max {
		for k, old := range s.m { // drop the expired, or else one at random
			if !sent.Before(old.until) {
				delete(s.m, k)
			}
		}
		if len(s.m) >= c.max {
			for k := range s.m {
				delete(s.m, k)
				break
			}
		}
	}
	s.m[key] = d
}

// forget drops key (Reset).
func (c *denialCache) forget(key string) {
	if c == nil {
		return
	}
	s := c.shard(key)
	s.mu.Lock()
	delete(s.m, key)
	s.mu.Unlock()
}
