// Package consumers is a corpus of Redis Lua scripts written as a user of
// luagen would write them, none of them a rate limiter: a lock with
// fencing tokens (lock_acquire, lock_release), idempotency keys, a
// top-N leaderboard, a stream consumer that claims and dead-letters
// messages, a JSON document updated through cjson, and feature flags in a
// bitmap. Each has a step file and generated code; verify's tests vet
// them, run their steps on the sandbox, miniredis and a real Redis, and
// check that each copy in seeded/, holding one planted bug, is caught.
// See docs/testing.md.
//
// Regenerate with go run ./cmd/luagen verify/testdata/consumers from the
// repository root.
package consumers
