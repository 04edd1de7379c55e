// Package bench compares sluice with peer Redis rate limiters
// (go-redis/redis_rate, throttled/throttled and ulule/limiter), with a bare
// GCRA script and with redis-benchmark, on one private redis-server.
// Everything is in its tests:
//
//   - go test: every measurement runs briefly and checks only that each
//     limiter decided as expected (TestReport, TestGrowth, TestHTTP,
//     TestSameDecisions).
//   - go test -run 'TestReport$' -report: the side-by-side comparison in
//     interleaved rounds, HTTP under load and the middleware overhead;
//     rewrites docs/benchmarks.md and its plot.
//   - go test -run 'TestGrowth$' -growth: memory and throughput as
//     identities, limits per request and cluster masters grow.
//   - go test -run '^$' -bench .: Go benchmarks, for profiling one case.
//
// The command in bench/rlsload compares sluice-rls with envoyproxy/ratelimit
// as Envoy calls them (ShouldRateLimit over gRPC); its test runs the same
// workload against sluice-rls alone and checks that it is exact.
//
// docs/benchmarks.md has the results and how to read them.
package bench
