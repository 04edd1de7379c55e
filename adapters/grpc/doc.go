// Package grpclimit rate limits gRPC calls with a sluice.Limiter: unary and
// stream server interceptors, a client interceptor that honours the
// refusals' details (and can rate limit outgoing calls itself), and an
// adapter to go-grpc-middleware v2's ratelimit.Limiter.
//
// Its policies are httplimit's policy model (package ratepolicy, shared by
// both): keys that compose (Join, FirstOf, Constant, APIKey, Subject, IP
// behind trusted proxies), hashed and bounded before they reach Redis;
// policies per method or per service ("/pkg.Svc/*"), tiers, exemptions,
// shadow mode, weighted cost and concurrency slots. A call's policies are
// decided by one Limiter.DecideInto: one round trip when admitted.
//
// A refusal is codes.ResourceExhausted with the details clients can act
// on (errdetails RetryInfo, QuotaFailure and ErrorInfo with reason
// RATE_LIMITED) and the grpc-retry-pushback-ms trailer gRPC's own retry
// policy honours; codes.Unavailable with RetryInfo when the Limiter fails
// closed while Redis is unavailable. The RateLimit and RateLimit-Policy
// values of draft-ietf-httpapi-ratelimit-headers-11 go into the response
// header metadata, spelled as httplimit spells the HTTP headers.
//
// docs/grpc.md in the repository explains every part.
package grpclimit
