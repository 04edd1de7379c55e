package sluice

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice/internal/keyslot"
	"github.com/sluice-go/sluice/runtime/luart"
)

// node is one Redis primary as the Limiter sees it: its circuit breaker
// and what the Limiter itself knows of its liveness (when it last replied
// to anything, and since when calls have waited on it). On a cluster each
// primary has its own, so a dead shard costs its own identities the failure
// policy and leaves the other shards' alone.
type node struct {
	addr    string
	silence time.Duration // the Limiter's silence timeout
	breaker *breaker
	// probe is the Limiter's own liveness probe of the node (a PING).
	probe func(context.Context) error

	lastReply atomic.Int64 // UnixNano of the last reply the node gave to any call or probe
	inflight  atomic.Int64 // calls of ours waiting on the node
	busySince atomic.Int64 // UnixNano since which calls have waited on it without a break; 0: none waiting
	probing   atomic.Bool
	suspect   atomic.Int64          // UnixNano when calls were last seen waiting the silence timeout; confirmed by silentNode
	sched     atomic.Pointer[sched] // the process's waits for a core (engine.sched) at suspect
	slots     chan struct{}         // one token per call out on the node, at most maxFlights

	// The hand-off (sender.go): flights waiting for a sender, the senders
	// at work, and the channel an idle sender waits on.
	mu      sync.Mutex
	queue   []*flight
	senders int
	wake    chan struct{}

	// The silence watch (watchNode): quiet is closed when the node is found
	// silent, waking every call waiting on it; a new one takes its place.
	quiet    atomic.Pointer[chan struct{}]
	watching atomic.Bool  // the watchdog is armed
	due      atomic.Int64 // UnixNano when the watchdog's look is due
	watchdog *time.Timer
}

// newNode is a node with its hand-off and silence watch set up; watch is
// the watchdog's look at it (Limiter.watchNode).
func newNode(addr string, silence time.Duration, probe func(context.Context) error, watch func(*node)) *node {
	n := &node{addr: addr, silence: silence, probe: probe, slots: make(chan struct{}, maxFlights), wake: make(chan struct{})}
	q := make(chan struct{})
	n.quiet.Store(&q)
	n.watchdog = time.AfterFunc(time.Hour, func() { watch(n) })
	n.watchdog.Stop()
	return n
}

// sending records that a call goes to the node at t; finished must follow.
// It arms the silence watch if it is not on.
func (n *node) sending(t time.Time) {
	if n.inflight.Add(1) == 1 {
		n.busySince.Store(t.UnixNano())
	}
	if !n.watching.Load() && n.watching.CompareAndSwap(false, true) {
		n.look(t, n.silentAt(n.silence))
	}
}

// look schedules the watchdog's next look at at (at once if at is zero or
// past); the look counts as due at at, or at now if that is later.
func (n *node) look(now, at time.Time) {
	due := at
	if due.Before(now) {
		due = now
	}
	n.due.Store(due.UnixNano())
	n.watchdog.Reset(due.Sub(now))
}

// hush wakes every call waiting on the node: it was found silent.
func (n *node) hush() {
	q := make(chan struct{})
	close(*n.quiet.Swap(&q))
}

// finished records that a call stopped waiting on the node at t, with a
// reply (of any kind, errors included) or without one.
func (n *node) finished(t time.Time, reply bool) {
	if reply {
		n.replied(t)
	}
	if n.inflight.Add(-1) == 0 {
		n.busySince.Store(0)
	}
}

// replied records that the node answered at t.
func (n *node) replied(t time.Time) {
	if ns := t.UnixNano(); n.lastReply.Load() < ns {
		n.lastReply.Store(ns)
	}
	n.breaker.answered()
}

// silentAt is the moment the node counts as silent if nothing arrives from
// it until then: silence after its last reply, or after calls began to
// wait on it if that is later. The zero Time means no call is waiting.
func (n *node) silentAt(silence time.Duration) time.Time {
	busy := n.busySince.Load()
	if busy == 0 || n.inflight.Load() == 0 {
		return time.Time{}
	}
	return time.Unix(0, max(busy, n.lastReply.Load())).Add(silence)
}

// silent reports whether, at now, calls have waited on the node for the
// whole silence timeout without any reply from it.
func (n *node) silent(now time.Time, silence time.Duration) bool {
	at := n.silentAt(silence)
	return !at.IsZero() && !now.Before(at)
}

// router finds the node that holds a key: the one node of a standalone or
// Sentinel client, or on a cluster the primary that CLUSTER SLOTS names
// for the key's hash slot. The slot map is refreshed in the background: on
// first use, every 30s, and (at most once a second) after a node fails.
type router struct {
	client     luart.Transport
	goroutines *goroutines
	cluster    bool
	newNode    func(addr string) *node
	any        *node // standalone: the node; cluster: used until the slot map is known

	slots       atomic.Pointer[[keyslot.Slots]*node]
	refreshing  atomic.Bool
	refreshedAt atomic.Int64 // UnixNano

	mu    sync.Mutex
	nodes map[string]*node // cluster primaries by host:port
}

func newRouter(client luart.Transport, g *goroutines, newNode func(addr string) *node) *router {
	r := &router{client: client, goroutines: g, newNode: newNode, nodes: map[string]*node{}}
	r.cluster = client.Cluster()
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
	if !r.goroutines.start(func() {
		defer r.refreshing.Store(false)
		ctx, cancel := context.WithTimeout(r.goroutines.ctx, 2*time.Second)
		defer cancel()
		m, err := r.load(ctx)
		r.refreshedAt.Store(time.Now().UnixNano())
		if err == nil {
			r.slots.Store(m)
		}
	}) {
		r.refreshing.Store(false)
	}
}

// load reads the slot map (CLUSTER SLOTS).
func (r *router) load(ctx context.Context) (*[keyslot.Slots]*node, error) {
	ranges, err := r.client.Slots(ctx)
	if err != nil {
		return nil, err
	}
	m := new([keyslot.Slots]*node)
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rg := range ranges {
		if rg.Start < 0 || rg.End >= keyslot.Slots || rg.Start > rg.End {
			continue
		}
		n := r.nodes[rg.Addr]
		if n == nil {
			n = r.newNode(rg.Addr)
			r.nodes[rg.Addr] = n
		}
		for s := rg.Start; s <= rg.End; s++ {
			m[s] = n
		}
	}
	// Forget nodes that hold no slot any more (a failed-over primary, a
	// removed shard): Health reports the cluster as it is.
	for addr, n := range r.nodes {
		if !slices.Contains(m[:], n) {
			delete(r.nodes, addr)
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

// sharedDeadline lends flights a deadline context made once per 1/8 of
// the bound instead of once per call (docs/limiter.md, the pipeline's
// step 2, has what that saved). Each flight's deadline lands between t and
// t + t/8 after it starts. The contexts derive from the Limiter's own,
// which Close cancels.
type sharedDeadline struct {
	root context.Context
	cur  atomic.Pointer[deadlineCtx]
}

type deadlineCtx struct {
	context.Context
	cancel     context.CancelFunc // kept so the context can be released; its timer ends it
	t          time.Duration
	reuseUntil int64 // UnixNano
}

// Deadline hides the bound from rueidis: given a context with a deadline
// and a connection with no other call waiting, rueidis writes the call
// synchronously with the deadline on the socket, where Close cannot end
// the wait and the deadline closes the connection. A context that only
// ends (Done) is queued on rueidis' pipelined connection instead, and its
// end ends the wait alone.
func (c *deadlineCtx) Deadline() (time.Time, bool) { return time.Time{}, false }

func (s *sharedDeadline) get(now time.Time, t time.Duration) context.Context {
	if c := s.cur.Load(); c != nil && now.UnixNano() < c.reuseUntil && c.t-c.t/8 <= t && t <= c.t {
		return c
	}
	slack := t / 8
	ctx, cancel := context.WithTimeout(s.root, t+slack)
	c := &deadlineCtx{Context: ctx, cancel: cancel, t: t + slack, reuseUntil: now.Add(slack).UnixNano()}
	s.cur.Store(c)
	return c
}
