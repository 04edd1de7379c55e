// Package overrides keeps per-identity exceptions to rate-limit policies in
// Redis: "identity X under policy P gets limit L until T", "is exempt",
// "is blocked". Operators set and remove them at run time (Store.Set,
// Store.Remove; the sluice CLI's override commands), and every replica
// obeys them on its next decision, with no extra round trip for a request
// in steady state: Store.Lookup answers from rueidis' server-assisted
// client-side cache, which Redis invalidates when a policy's overrides
// change (or, where the client does not cache, from a local copy
// refreshed at most once per Options.LocalCache).
//
// Give a Store to httplimit.Config.Overrides or grpclimit.Config.Overrides:
// the policy engine looks each policy's identity up before deciding. A
// Limit override keeps the policy's algorithm and limit name, so the
// identity's state in Redis carries over; an Exempt one skips the policy
// for that identity; a Block one denies it without asking Redis.
//
// docs/overrides.md has the model, the layout in Redis, the bounds, what
// each kind does to the RateLimit headers, the measurements behind the
// client-cache design and the behaviour when Redis fails.
package overrides
