// Package httplimit rate limits HTTP requests with a sluice.Limiter,
// using nothing but net/http. Everything the framework adapters share lives
// here, written once: identities (KeyFunc), policies, tiers and per-route
// limits, the RateLimit / RateLimit-Policy headers of
// draft-ietf-httpapi-ratelimit-headers-11 and the legacy X-RateLimit-*
// set, RFC 9457 problem bodies, shadow mode and the failure responses.
//
// Middleware.Handler and Middleware.Wrap are the net/http middleware;
// Middleware.Serve is the entry point the gin and echo adapters call, and
// Middleware.ServeRouteFunc the one for adapters whose route lookup costs
// (chi's).
// docs/http.md in the repository explains the trust model and every
// header.
package httplimit
