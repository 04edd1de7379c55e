package luart_test

import (
	"context"
	"fmt"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice/runtime/luart"
)

// Generated code builds calls with NAME.Call and decodes with NAME.Decode;
// this example spells out what those do, with a hand-made Script.
func ExampleExec() {
	m, _ := miniredis.Run()
	defer m.Close()
	client, _ := rueidis.NewClient(rueidis.ClientOption{
		InitAddress: []string{m.Addr()}, DisableCache: true, ForceSingleClient: true,
	})
	defer client.Close()

	incr := &luart.Script{
		Name:   "incr",
		Source: "return {redis.call('INCR', KEYS[1])}",
		SHA1:   "5776e4f8da640afb63c63118463713b0b4eeeff9", // computed by luagen in generated code
	}
	calls := []luart.Call{
		{Script: incr, Keys: []string{"hits:{a}"}},
		{Script: incr, Keys: []string{"hits:{b}"}},
		{Script: incr, Keys: []string{"hits:{a}"}},
	}
	// One round trip for all three; unknown scripts are resent as EVAL.
	for _, res := range luart.Exec(context.Background(), client, calls...) {
		d := luart.NewDecoder(incr, res, 1)
		n := d.Int(0, "n")
		fmt.Println(n, d.Err())
	}
	// Output:
	// 1 <nil>
	// 1 <nil>
	// 2 <nil>
}
