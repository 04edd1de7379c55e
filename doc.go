// Package sluice is a distributed rate limiter whose decisions are made by
// Lua scripts in Redis: one atomic script call per decision, shared by every
// replica of a service, so a quota of 100 per minute is 100 per minute
// whatever the number of replicas.
//
// Build a Limit with a constructor per algorithm (GCRA, TokenBucket,
// FixedWindow, SlidingWindow, SlidingLog, Concurrency), which validates it,
// and ask a Limiter built over a rueidis client:
//
//	limiter, err := sluice.New(client)
//	perUser := sluice.Must(sluice.GCRA(100, time.Minute, 20))
//	res, err := limiter.Allow(ctx, userID, perUser)
//
// A program that already holds a go-redis v9 client builds the Limiter on
// it: NewFromTransport takes any luart.Transport, and module
// transport/goredis has the one of a go-redis client.
//
// Each limit has one state per identity, a Redis key named by the limit
// (Limiter.Key): Allow, AllowN, Peek, AllowAll (several limits of one
// identity at once, all-or-nothing), Decide, Reset and
// Acquire/Release/Extend for concurrency limits all address that same
// state.
//
// Decide takes a request's limits on any identities at once (per IP, per
// API key, per route, a concurrency slot) in one round trip, with a Result
// for each, and a denied request charged nothing. Reserve, Wait and their
// N forms are the caller's side: a fleet of workers keeping one upstream's
// rate together, each waiting its turn.
//
// OpenClient builds a client that a Redis down at start-up does not stop:
// the failure policy decides until Redis answers.
//
// Every call goes through one decision pipeline: the circuit breaker, the
// per-call timeout, the script call, the classification of an error (the
// caller's own cancellation or deadline, a script's refusal of its
// arguments, or a failure of Redis), the failure policy (fail-open,
// fail-closed, or a local in-memory quota) and metrics. The error returned
// by a decision is non-nil only for invalid input or for the caller's own
// context; Redis failures become decisions of the failure policy, marked
// Result.Degraded.
//
// docs/limiter.md is the guide; docs/algorithms.md explains each algorithm.
package sluice
