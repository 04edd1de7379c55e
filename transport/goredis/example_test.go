package goredis_test

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/scripts"
	"github.com/sluice-go/sluice/transport/goredis"
)

// A generated script run on a go-redis client: Call builds the call, Do
// sends it (EVALSHA, or EVAL the first time) and DecodeReply reads the
// typed result.
func Example() {
	m, _ := miniredis.Run() // any Redis; miniredis here, so the example runs anywhere
	defer m.Close()
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1}) // a script charging a quota must not run twice
	defer rdb.Close()
	ctx := context.Background()

	limit := scripts.GCRAArgs{Limit: 10, Period: time.Minute.Microseconds(), Burst: 3, Cost: 1}
	for range 4 {
		res, err := scripts.GCRA.DecodeReply(goredis.Do(ctx, rdb, scripts.GCRA.Call(scripts.GCRAKeys{State: "rl:{user-42}"}, limit)))
		fmt.Println(res.Allowed, res.Remaining, err)
	}
	// Output:
	// true 2 <nil>
	// true 1 <nil>
	// true 0 <nil>
	// false 0 <nil>
}

// A Limiter over the go-redis client a program already holds: Transport
// adapts it, and sluice.NewFromTransport takes it where sluice.New takes a
// rueidis client. The decisions are the same.
func ExampleTransport() {
	m, _ := miniredis.Run() // any Redis; miniredis here, so the example runs anywhere
	defer m.Close()
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer rdb.Close()

	t, err := goredis.Transport(rdb)
	if err != nil {
		panic(err)
	}
	limiter, err := sluice.NewFromTransport(t)
	if err != nil {
		panic(err)
	}
	defer limiter.Close()

	ctx := context.Background()
	perUser := sluice.Must(sluice.GCRA(10, time.Minute, 3))
	for range 4 {
		r, err := limiter.Allow(ctx, "user-42", perUser)
		fmt.Println(r.Allowed, r.Remaining, err)
	}
	// Output:
	// true 2 <nil>
	// true 1 <nil>
	// true 0 <nil>
	// false 0 <nil>
}
