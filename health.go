package sluice

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Health is the Limiter's view of its Redis nodes, for readiness probes and
// dashboards. It costs no round trip: it reports what recent calls saw.
type Health struct {
	// Nodes lists every Redis node the Limiter has sent calls to: the one
	// node of a standalone or Sentinel client ("redis"), or each cluster
	// primary by host:port (and "cluster" for calls made before the slot
	// map was known).
	Nodes []NodeHealth
	// Policy is the failure policy deciding for nodes whose breaker is open.
	Policy FailurePolicy
}

// NodeHealth is one node's state.
type NodeHealth struct {
	// Addr is the node's host:port, or "redis" / "cluster" (see Health).
	Addr string
	// Breaker is "closed" (calls go to the node), "open" (the failure
	// policy decides without asking it) or "half-open" (one probe is out).
	Breaker string
	// LastReply is when the node last answered a call or the Limiter's
	// probe; zero if never.
	LastReply time.Time
	// InFlight is the number of calls waiting on the node now.
	InFlight int64
}

// ErrUnhealthy means at least one Redis node's circuit breaker is not
// closed: decisions for the identities it holds come from the failure
// policy. Health.Err wraps it, naming the nodes.
var ErrUnhealthy = errors.New("sluice: Redis unavailable")

// Health reports the state of every Redis node the Limiter knows. For a
// node whose breaker's cooldown has passed it starts the Limiter's probe
// (in the background), so that a readiness check sees the node come back
// even while no traffic reaches it.
func (l *Limiter) Health() Health { return l.e.health() }

func (e *engine) health() Health {
	h := Health{Policy: e.cfg.policy}
	for _, n := range e.router.all() {
		if ok, probe := n.breaker.allow(); !ok && probe {
			e.probe(n) // a readiness check with no traffic still sees the node come back
		}
		nh := NodeHealth{Addr: n.addr, Breaker: n.breaker.current().String(), InFlight: n.inflight.Load()}
		if ns := n.lastReply.Load(); ns > 0 {
			nh.LastReply = time.Unix(0, ns)
		}
		h.Nodes = append(h.Nodes, nh)
	}
	return h
}

// Err is nil when every node's breaker is closed, else ErrUnhealthy naming
// the nodes that are not.
func (h Health) Err() error {
	var bad []string
	for _, n := range h.Nodes {
		if n.Breaker != breakerClosed.String() {
			bad = append(bad, n.Addr+" "+n.Breaker)
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return fmt.Errorf("%w: circuit breaker %s (%s decides)", ErrUnhealthy, strings.Join(bad, ", "), h.Policy)
}
