// Package ratepolicy is the policy model the HTTP and gRPC adapters share:
// identities (keys, their hashing and bounds, the client address behind
// trusted proxies), policies and their validation, tiers and per-route (or
// per-method) policy sets, the one batch decision a request makes
// (Limiter.DecideInto), shadow mode, metrics, the release of concurrency
// slots, and the text of RateLimit / RateLimit-Policy values
// (draft-ietf-httpapi-ratelimit-headers-11).
//
// It is generic over the request type R an adapter hands its policies
// (*http.Request for httplimit, *grpclimit.Call for the gRPC adapter) and
// knows nothing of HTTP or gRPC. Applications use httplimit or the gRPC
// adapter; this package is for adapters.
package ratepolicy
