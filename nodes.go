package sluice

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice/internal/keyslot"
)

// node is one Redis primary as the Limiter sees it: its circuit breaker,
// when it last answered, and how long its answers take. On a cluster each
// primary has its own, so a dead shard costs its own identities the failure
// policy and leaves the other shards' alone.
type node struct {
	addr      string
	breaker   *breaker
	lastReply atomic.Int64 // UnixNano of the last reply this node gave to any call
	latency   latency
	deadlines sharedDeadline

	inflight     atomic.Int64 // calls of ours waiting on the node
	waitingSince atomic.Int64 // UnixNano since which calls have waited on the node with no reply; 0: none waiting
}

// replied records an answer from the node, at now, to a call that took d.
func (n *node) replied(now time.Time, d time.Duration) {
	n.lastReply.Store(now.UnixNano())
	if n.waitingSince.Load() != 0 {
		n.waitingSince.Store(0)
	}
	n.latency.observe(d)
}

// sending records that a call goes to the node at t; finished must follow.
func (n *node) sending(t time.Time) {
	n.inflight.Add(1)
	n.waitingSince.CompareAndSwap(0, t.UnixNano())
}

// finished records that a call stopped waiting on the node, answered or not.
func (n *node) finished() {
	if n.inflight.Add(-1) == 0 {
		n.waitingSince.Store(0)
	}
}

// silentFor reports whether calls have waited on the node for at least d
// without the node answering any of them: whoever gave up on those calls
// (their callers, or a deadline rueidis took from another call), the node
// is not answering.
func (n *node) silentFor(now time.Time, d time.Duration) bool {
	ws := n.waitingSince.Load()
	return ws != 0 && now.Sub(time.Unix(0, ws)) >= d
}

// answeredSince reports whether the node answered any call after t: a call
// of ours that timed out meanwhile was slow on our side or in the queue, not
// a sign that the node is down.
func (n *node) answeredSince(t time.Time) bool { return n.lastReply.Load() > t.UnixNano() }

// latency keeps a decaying high-water mark of reply times: it jumps to a
// slower reply at once and forgets it slowly (by 1/1024 per reply), so the
// timeout it suggests follows a loaded host up quickly and comes down over
// a few thousand calls.
type latency struct{ hi atomic.Int64 } // ns

func (l *latency) observe(d time.Duration) {
	for {
		old := l.hi.Load()
		nw := old - old/1024
		if int64(d) > nw {
			nw = int64(d)
		}
		if nw == old || l.hi.CompareAndSwap(old, nw) {
			return
		}
	}
}

// timeout is 4× the high-water mark, within [lo, hi].
func (l *latency) timeout(lo, hi time.Duration) time.Duration {
	return min(max(4*time.Duration(l.hi.Load()), lo), hi)
}

// router finds the node that holds a key: the one node of a standalone or
// Sentinel client, or on a cluster the primary that CLUSTER SLOTS names
// for the key's hash slot. The slot map is refreshed in the background: on
// first use, every 30s, and (at most once a second) after a node fails.
type router struct {
	client  rueidis.Client
	cluster bool
	newNode func(addr string) *node
	any     *node // standalone: the node; cluster: used until the slot map is known

	slots       atomic.Pointer[[keyslot.Slots]*node]
	refreshing  atomic.Bool
	refreshedAt atomic.Int64 // UnixNano

	mu    sync.Mutex
	nodes map[string]*node // cluster primaries by host:port
}

func newRouter(client rueidis.Client, newNode func(addr string) *node) *router {
	r := &router{client: client, newNode: newNode, nodes: map[string]*node{}}
	r.cluster = client.Mode() == rueidis.ClientModeCluster
	if r.cluster {
		r.any = newNode("cluster")
	} else {
		r.any = newNode("redis")
	}
	return r
}

// nodeFor returns the node holding key.
func (r *router) nodeFor(key string) *node {
	if !r.cluster {
		return r.any
	}
	m := r.slots.Load()
	if m == nil || time.Since(time.Unix(0, r.refreshedAt.Load())) > 30*time.Second {
		r.refresh(0)
	}
	if m == nil {
		return r.any
	}
	if n := m[keyslot.Of(key)]; n != nil {
		return n
	}
	return r.any
}

// failed asks for a slot map refresh after a node failed: the slot may
// have moved (failover, resharding).
func (r *router) failed() {
	if r.cluster {
		r.refresh(time.Second)
	}
}

// refresh reloads the slot map in the background unless one is under way
// or the last one is younger than minAge.
func (r *router) refresh(minAge time.Duration) {
	if minAge > 0 && time.Since(time.Unix(0, r.refreshedAt.Load())) < minAge {
		return
	}
	if !r.refreshing.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer r.refreshing.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		m, err := r.load(ctx)
		r.refreshedAt.Store(time.Now().UnixNano())
		if err == nil {
			r.slots.Store(m)
		}
	}()
}

// load reads CLUSTER SLOTS: [[start, end, [host, port, id, …], replicas…], …].
func (r *router) load(ctx context.Context) (*[keyslot.Slots]*node, error) {
	ranges, err := r.client.Do(ctx, r.client.B().ClusterSlots().Build()).ToArray()
	if err != nil {
		return nil, err
	}
	m := new([keyslot.Slots]*node)
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rg := range ranges {
		f, err := rg.ToArray()
		if err != nil || len(f) < 3 {
			continue
		}
		start, err1 := f[0].AsInt64()
		end, err2 := f[1].AsInt64()
		primary, err3 := f[2].ToArray()
		if err1 != nil || err2 != nil || err3 != nil || len(primary) < 2 || start < 0 || end >= keyslot.Slots || start > end {
			continue
		}
		host, _ := primary[0].ToString()
		port, _ := primary[1].AsInt64()
		addr := host + ":" + strconv.FormatInt(port, 10)
		n := r.nodes[addr]
		if n == nil {
			n = r.newNode(addr)
			r.nodes[addr] = n
		}
		for s := start; s <= end; s++ {
			m[s] = n
		}
	}
	return m, nil
}

// all lists every node known, the fallback node first.
func (r *router) all() []*node {
	out := []*node{r.any}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range r.nodes {
		out = append(out, n)
	}
	slices.SortFunc(out[1:], func(a, b *node) int { return strings.Compare(a.addr, b.addr) })
	return out
}

// sharedDeadline lends calls whose own context can never end (Done() is
// nil: context.Background and contexts derived from it only by values) a
// deadline context made once per 1/8 of the timeout instead of once per
// call: a timer and three allocations fewer per decision. Each call's
// deadline lands between t and t + t/8 after it starts.
type sharedDeadline struct{ cur atomic.Pointer[deadlineCtx] }

type deadlineCtx struct {
	context.Context
	cancel     context.CancelFunc // kept so the context can be released; its timer ends it
	t          time.Duration
	reuseUntil int64 // UnixNano
}

func (s *sharedDeadline) get(now time.Time, t time.Duration) *deadlineCtx {
	if c := s.cur.Load(); c != nil && now.UnixNano() < c.reuseUntil && c.t-c.t/8 <= t && t <= c.t {
		return c
	}
	slack := t / 8
	ctx, cancel := context.WithTimeout(context.Background(), t+slack)
	c := &deadlineCtx{Context: ctx, cancel: cancel, t: t + slack, reuseUntil: now.Add(slack).UnixNano()}
	s.cur.Store(c)
	return c
}

// withValues is a borrowed deadline context that keeps the caller's values.
type withValues struct {
	context.Context // the caller's, for Value
	d               *deadlineCtx
}

func (w *withValues) Deadline() (time.Time, bool) { return w.d.Deadline() }
func (w *withValues) Done() <-chan struct{}       { return w.d.Done() }
func (w *withValues) Err() error                  { return w.d.Err() }
