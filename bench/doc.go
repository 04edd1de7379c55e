// Package bench compares sluice with peer Redis rate limiters
// (go-redis/redis_rate and ulule/limiter) on one private redis-server.
// Everything is in its tests: `go test` checks that the compared limiters
// admit the same requests, `go test -run '^$' -bench .` measures them.
// docs/benchmarks.md has the results and how to read them.
package bench
