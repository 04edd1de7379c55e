// Package goredis runs a sluice Limiter and the scripts luagen generates on
// a go-redis v9 client (github.com/redis/go-redis/v9): a *redis.Client, a
// *redis.ClusterClient, a failover client or any redis.UniversalClient, so
// a program that already holds one needs no second client.
//
// Transport is the client as a luart.Transport, for
// sluice.NewFromTransport:
//
//	t, err := goredis.Transport(rdb)
//	limiter, err := sluice.NewFromTransport(t)
//
// Do sends one call and Exec many in one pipeline; both send EVALSHA with
// the SHA1 computed when the code was generated and, for a call the server
// answers NOSCRIPT (after a restart, a failover or SCRIPT FLUSH), EVAL once,
// which also loads the script. Read-only scripts go as EVALSHA_RO and
// EVAL_RO. Each reply is a luart.Reply, which the generated DecodeReply
// methods read:
//
//	res, err := scripts.GCRA.DecodeReply(goredis.Do(ctx, rdb, scripts.GCRA.Call(keys, args)))
//
// go-redis retries a command whose connection failed (Options.MaxRetries,
// 3 by default), so a script Do or Exec sends whose reply was lost can run
// twice. A script that must run at most once per call (one that charges a
// quota) wants a client with MaxRetries: -1. (The Limiter's Transport sends
// each of its commands once, whatever MaxRetries says.)
package goredis

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice/runtime/luart"
)

// Do sends one call: EVALSHA, then EVAL once when the server answers
// NOSCRIPT.
func Do(ctx context.Context, c redis.Scripter, call luart.Call) luart.Reply {
	if call.Script == nil {
		return luart.FromValue(nil, luart.ErrNilScript)
	}
	args := anys(call.Args)
	r := luart.FromValue(evalsha(ctx, c, call, args).Result())
	if r.IsNoScript() {
		r = luart.FromValue(eval(ctx, c, call, args).Result())
	}
	return r
}

// Pipeliner is a client that pipelines: *redis.Client, *redis.ClusterClient,
// *redis.Ring and every redis.UniversalClient.
type Pipeliner interface {
	Pipeline() redis.Pipeliner
}

// Exec sends many calls, of any scripts and on any keys, in one pipeline
// (on a cluster client go-redis sends each node its part, the nodes in
// parallel). The calls the server answers NOSCRIPT go once more as EVAL,
// together in a second pipeline. The replies are in the order of calls.
func Exec(ctx context.Context, c Pipeliner, calls ...luart.Call) []luart.Reply {
	if len(calls) == 0 {
		return nil
	}
	out := make([]luart.Reply, len(calls))
	args := make([][]any, len(calls))
	cmds := make([]*redis.Cmd, len(calls))
	p := c.Pipeline()
	for i, call := range calls {
		if call.Script == nil {
			out[i] = luart.FromValue(nil, luart.ErrNilScript)
			continue
		}
		args[i] = anys(call.Args)
		cmds[i] = evalsha(ctx, p, call, args[i])
	}
	if p.Len() == 0 {
		return out
	}
	_, _ = p.Exec(ctx) // each command holds its own reply or error
	var again []int
	for i, cmd := range cmds {
		if cmd == nil {
			continue
		}
		out[i] = luart.FromValue(cmd.Result())
		if out[i].IsNoScript() {
			again = append(again, i)
		}
	}
	if len(again) == 0 {
		return out
	}
	p = c.Pipeline()
	for _, i := range again {
		cmds[i] = eval(ctx, p, calls[i], args[i])
	}
	_, _ = p.Exec(ctx)
	for _, i := range again {
		out[i] = luart.FromValue(cmds[i].Result())
	}
	return out
}

// Load sends SCRIPT LOAD for each script so that later calls skip the
// NOSCRIPT round trip, and checks that the server computes the SHA1 the
// generated code carries. A cluster client (or a Ring) loads them on
// every shard, replicas included, since Redis does not replicate SCRIPT
// LOAD; another client on the node it talks to. Every failure is returned,
// joined, as a *luart.Error naming the script (and the node on a cluster).
func Load(ctx context.Context, c redis.UniversalClient, scripts ...*luart.Script) error {
	if len(scripts) == 0 {
		return nil
	}
	shards, ok := c.(interface {
		ForEachShard(context.Context, func(context.Context, *redis.Client) error) error
	})
	if !ok {
		return errors.Join(load(ctx, c, "", scripts)...)
	}
	var mu sync.Mutex
	var errs []error
	err := shards.ForEachShard(ctx, func(ctx context.Context, node *redis.Client) error {
		e := load(ctx, node, node.Options().Addr, scripts)
		mu.Lock()
		errs = append(errs, e...)
		mu.Unlock()
		return nil
	})
	sort.Slice(errs, func(i, j int) bool { return errs[i].Error() < errs[j].Error() })
	return errors.Join(append(errs, err)...)
}

// load loads scripts on c in one pipeline; addr names the node in errors.
func load(ctx context.Context, c redis.Cmdable, addr string, scripts []*luart.Script) []error {
	cmds := make([]*redis.StringCmd, len(scripts))
	p := c.Pipeline()
	for i, s := range scripts {
		cmds[i] = p.ScriptLoad(ctx, s.Source)
	}
	_, _ = p.Exec(ctx)
	var errs []error
	for i, s := range scripts {
		sha, err := cmds[i].Result()
		if err == nil && sha != s.SHA1 {
			err = fmt.Errorf("server SHA1 %s differs from generated %s; regenerate with luagen", sha, s.SHA1)
		}
		if err == nil {
			continue
		}
		if addr != "" {
			err = fmt.Errorf("on %s: %w", addr, err)
		}
		errs = append(errs, &luart.Error{Script: s.Name, Err: err})
	}
	return errs
}

// evalsha queues or sends call's EVALSHA (EVALSHA_RO for a read-only script).
func evalsha(ctx context.Context, c redis.Scripter, call luart.Call, args []any) *redis.Cmd {
	if call.Script.ReadOnly {
		return c.EvalShaRO(ctx, call.Script.SHA1, call.Keys, args...)
	}
	return c.EvalSha(ctx, call.Script.SHA1, call.Keys, args...)
}

// eval queues or sends call's EVAL (EVAL_RO), which also loads the script.
func eval(ctx context.Context, c redis.Scripter, call luart.Call, args []any) *redis.Cmd {
	if call.Script.ReadOnly {
		return c.EvalRO(ctx, call.Script.Source, call.Keys, args...)
	}
	return c.Eval(ctx, call.Script.Source, call.Keys, args...)
}

// anys is s as go-redis takes command arguments.
func anys(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}
