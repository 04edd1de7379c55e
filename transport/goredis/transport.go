package goredis

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice/runtime/luart"
)

// Transport is the luart.Transport of a go-redis client, for
// sluice.NewFromTransport: a Limiter over the client a program already
// holds.
//
//	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
//	t, err := goredis.Transport(rdb)
//	...
//	limiter, err := sluice.NewFromTransport(t)
//
// c is a *redis.Client (standalone, or a failover client over Sentinel) or
// a *redis.ClusterClient (a cluster, or a failover cluster client). A
// *redis.Ring is refused: it shards keys by its own hash, not by the
// cluster's slots, so the Limiter cannot tell which node a key is on.
//
// The transport sends every command once, whatever the client's MaxRetries
// (a script whose reply was lost with its connection may have charged:
// sending it again could charge twice); MOVED and ASK redirects, which say
// the command did not run, are still followed. The client's timeouts bound
// each call (ReadTimeout, 3s by default); the Limiter answers a caller
// from its failure policy long before, when a node stays silent
// (sluice.WithSilenceTimeout).
//
// By default each caller's command takes a pooled connection of its own;
// WithAutoPipeline batches the commands of concurrent callers instead.
func Transport(c redis.UniversalClient, opts ...Option) (luart.Transport, error) {
	var o options
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	var t *transport
	switch c := c.(type) {
	case nil:
		return nil, errors.New("goredis: nil client")
	case *redis.Client:
		if c == nil {
			return nil, errors.New("goredis: nil client")
		}
		t = &transport{c: c}
	case *redis.ClusterClient:
		if c == nil {
			return nil, errors.New("goredis: nil client")
		}
		t = &transport{c: c, cluster: c}
	case *redis.Ring:
		return nil, errors.New("goredis: a *redis.Ring shards keys by its own hash, not by Redis Cluster's slots: use a *redis.Client per node or a *redis.ClusterClient")
	default:
		return nil, fmt.Errorf("goredis: unsupported client %T: want a *redis.Client or a *redis.ClusterClient", c)
	}
	if o.autoPipeline {
		ap, err := t.c.(interface {
			AutoPipeline() (*redis.AutoPipeliner, error)
		}).AutoPipeline()
		if err != nil {
			return nil, fmt.Errorf("goredis: the client's AutoPipeline: %w", err)
		}
		t.ap = ap
	}
	return t, nil
}

type transport struct {
	c       redis.UniversalClient
	cluster *redis.ClusterClient // nil: not a cluster
	ap      *redis.AutoPipeliner // WithAutoPipeline: single commands go through it
}

// Option configures Transport.
type Option func(*options)

type options struct {
	autoPipeline bool
}

// WithAutoPipeline sends each single command (a decision of one identity,
// the usual call) through the client's AutoPipeliner, which writes the
// commands of concurrent callers to one connection in one batch, as rueidis
// does, instead of a pooled connection per caller. At 128 concurrent
// callers it measured 0.81-0.85× the decisions per second of sluice on
// rueidis, against 0.51-0.62× without; a lone caller pays a little more
// (0.86×; docs/benchmarks.md, "On a go-redis client"). go-redis marks its
// AutoPipeliner experimental; the AutoPipelineOptions of the client's
// options configure it. Commands are still sent once each.
func WithAutoPipeline() Option { return func(o *options) { o.autoPipeline = true } }

// once is a command go-redis must not send again when its connection
// fails: a script may have run.
type once struct{ *redis.Cmd }

func (once) NoRetry() bool { return true }

// clusterTime is TIME as a script on one key: on a cluster the script goes
// to the primary of its key's slot, where TIME alone would go to any node.
// It is sent as EVAL (Redis keeps it compiled after the first).
const clusterTime = "return redis.call('TIME')"

func (t *transport) Send(ctx context.Context, cmds []luart.Cmd, replies []luart.Reply) {
	if err := ctx.Err(); err != nil {
		// Nothing is sent once ctx has ended (the AutoPipeliner would
		// still queue a command).
		for i := range cmds {
			replies[i] = luart.FromValue(nil, err)
		}
		return
	}
	if len(cmds) == 1 {
		c := t.command(ctx, &cmds[0])
		if t.ap != nil {
			_ = t.ap.Process(ctx, once{c})
		} else {
			_ = t.c.Process(ctx, once{c})
		}
		replies[0] = replyOf(c)
		return
	}
	sent := make([]*redis.Cmd, len(cmds))
	p := t.c.Pipeline()
	for i := range cmds {
		sent[i] = t.command(ctx, &cmds[i])
		_ = p.Process(ctx, once{sent[i]})
	}
	_, _ = p.Exec(ctx) // each command holds its own reply or error
	for i, c := range sent {
		replies[i] = replyOf(c)
	}
}

// command is the go-redis command of c.
func (t *transport) command(ctx context.Context, c *luart.Cmd) *redis.Cmd {
	var args []any
	switch c.Op {
	case luart.OpEvalSha, luart.OpEval:
		s := c.Call.Script
		if s == nil {
			cmd := redis.NewCmd(ctx)
			cmd.SetErr(luart.ErrNilScript)
			return cmd
		}
		args = make([]any, 0, 3+len(c.Call.Keys)+len(c.Call.Args))
		// (Each name a constant: boxed without an allocation.)
		switch {
		case c.Op == luart.OpEval && s.ReadOnly:
			args = append(args, "eval_ro", s.Source)
		case c.Op == luart.OpEval:
			args = append(args, "eval", s.Source)
		case s.ReadOnly:
			args = append(args, "evalsha_ro", s.SHA1)
		default:
			args = append(args, "evalsha", s.SHA1)
		}
		args = append(args, len(c.Call.Keys))
		for _, k := range c.Call.Keys {
			args = append(args, k)
		}
		for _, a := range c.Call.Args {
			args = append(args, a)
		}
	case luart.OpDel:
		args = make([]any, 0, 1+len(c.Keys))
		args = append(args, "del")
		for _, k := range c.Keys {
			args = append(args, k)
		}
	case luart.OpTime:
		if t.cluster != nil && len(c.Keys) > 0 {
			args = []any{"eval", clusterTime, 1, c.Keys[0]}
		} else {
			args = []any{"time"}
		}
	default:
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(fmt.Errorf("goredis: unknown command %d", c.Op))
		return cmd
	}
	return redis.NewCmd(ctx, args...)
}

// replyOf is c's reply: a nil reply is a value, not go-redis' redis.Nil.
func replyOf(c *redis.Cmd) luart.Reply {
	v, err := c.Result()
	if err == redis.Nil {
		err = nil
	}
	return luart.FromValue(v, err)
}

func (t *transport) Cluster() bool { return t.cluster != nil }

func (t *transport) Slots(ctx context.Context) ([]luart.SlotRange, error) {
	slots, err := t.c.ClusterSlots(ctx).Result()
	if err != nil {
		return nil, err
	}
	out := make([]luart.SlotRange, 0, len(slots))
	for _, s := range slots {
		if len(s.Nodes) == 0 {
			continue
		}
		out = append(out, luart.SlotRange{Start: s.Start, End: s.End, Addr: s.Nodes[0].Addr})
	}
	return out, nil
}

func (t *transport) Ping(ctx context.Context, addr string) error {
	if t.cluster == nil || addr == "" {
		return t.c.Ping(ctx).Err()
	}
	var err error
	found := false
	ferr := t.cluster.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		if node.Options().Addr == addr {
			found = true
			err = node.Ping(ctx).Err()
		}
		return nil
	})
	if !found {
		if ferr != nil {
			return ferr
		}
		return t.c.Ping(ctx).Err()
	}
	return err
}
