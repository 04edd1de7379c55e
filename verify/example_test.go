package verify_test

import (
	"context"
	"fmt"

	"github.com/sluice-go/sluice/verify"
)

// A script runs in the sandbox as in Redis 7: numbers sent with redis.call
// are formatted with %.17g, a float in the reply is truncated, and every
// command is recorded with its line.
func ExampleSandbox_Run() {
	sb, err := verify.NewSandbox()
	if err != nil {
		panic(err)
	}
	defer sb.Close()
	script := `redis.call('SET', KEYS[1], 0.1, 'PX', 1000)
return {redis.call('GET', KEYS[1]), 7 / 2}`
	run, err := sb.Run(context.Background(), script, []string{"k"}, nil)
	if err != nil {
		panic(err)
	}
	fmt.Println(run.Reply)
	for _, c := range run.Calls {
		fmt.Println(c.Line, c.Args)
	}
	fmt.Printf("line %d returned %v as %d\n", run.Floats[0].Line, run.Floats[0].Value, run.Floats[0].Sent)
	// Output:
	// ["0.10000000000000001", 3]
	// 1 [SET k 0.10000000000000001 PX 1000]
	// 2 [GET k]
	// line 2 returned 3.5 as 3
}

// Vet finds a key written without a TTL and a global assignment.
func ExampleVetSource() {
	src := `-- @script hit
-- @key counter   hits
-- @return hits int
count = redis.call('INCR', KEYS[1])
return {count}`
	for _, f := range verify.VetSource("hit.lua", []byte(src), nil) {
		fmt.Println(f)
	}
	// Output:
	// hit.lua:4:1: assignment to global count: Redis scripts cannot create or change globals (declare it local) (global-write)
	// hit.lua:4:9: INCR writes key "{vet}:counter" and leaves it without a TTL: it would stay forever (give it one with PEXPIRE or EXPIRE after the write) (no-ttl)
}

// Steps run on several environments at once; here the sandbox and
// miniredis agree and meet every expectation.
func ExampleRunSteps() {
	sb, _ := verify.NewSandbox()
	defer sb.Close()
	mini, _ := verify.NewMiniredis()
	defer mini.Close()
	sf, err := verify.ParseStepFile("count.steps.txtar", []byte(`
-- first --
keys {c}:n
reply 1
ttl {c}:n 1000

-- a second later --
at 1s
reply 1
`))
	if err != nil {
		panic(err)
	}
	script := "local n = redis.call('INCR', KEYS[1]) if n == 1 then redis.call('PEXPIRE', KEYS[1], 1000) end return n"
	rep, err := verify.RunSteps(context.Background(), script, sf.Steps, sb, mini)
	if err != nil {
		panic(err)
	}
	fmt.Println(rep.Steps, "steps on", rep.Envs, "ok:", rep.OK())
	// Output:
	// 2 steps on [sandbox miniredis] ok: true
}

func ExampleParseReply() {
	want := verify.MustParseReply(`[1, _, err:"ERR limit"]`)
	got := verify.Array(verify.Int(1), verify.Bulk("anything"), verify.Err("ERR limit must be >= 1"))
	fmt.Println(want.Match(got))
	// Output:
	// true
}
