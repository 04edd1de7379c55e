// Package transporttest holds the tests every luart.Transport passes, and
// a sluice Limiter over it, against real redis-servers: a standalone one
// and a 3-master cluster. The root package runs them on luart.Rueidis,
// module transport/goredis on its go-redis transport, so both clients are
// held to one contract.
package transporttest

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/redisserver"
	"github.com/sluice-go/sluice/runtime/luart"
)

// Maker returns a transport over a new client of the servers at addrs (a
// cluster's nodes when cluster is set); the client is closed when t ends.
type Maker func(t *testing.T, addrs []string, cluster bool) luart.Transport

// Run runs every test on transports mk makes: the commands themselves
// (Commands), then a Limiter over them (Limiter), on a standalone server
// and on a 3-master cluster, the two in parallel.
func Run(t *testing.T, mk Maker) {
	t.Run("standalone", func(t *testing.T) {
		t.Parallel()
		s := redisserver.Start(t)
		env := &Env{Addrs: []string{s.Addr}, Nodes: []*redisserver.Server{s}, Make: mk}
		t.Run("commands", func(t *testing.T) { Commands(t, env) })
		t.Run("limiter", func(t *testing.T) { Limiter(t, env) })
		t.Run("faults", func(t *testing.T) { Faults(t, mk) })
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		cl := redisserver.StartCluster(t, 3)
		env := &Env{Addrs: cl.Addrs(), Nodes: cl.Nodes, Cluster: true, Make: mk}
		t.Run("commands", func(t *testing.T) { Commands(t, env) })
		t.Run("limiter", func(t *testing.T) { Limiter(t, env) })
	})
}

// Env is the servers the tests run on.
type Env struct {
	Addrs   []string
	Nodes   []*redisserver.Server
	Cluster bool
	Make    Maker
}

func (e *Env) transport(t *testing.T) luart.Transport { return e.Make(t, e.Addrs, e.Cluster) }

// owner is the node serving key's slot: the others answer MOVED.
func (e *Env) owner(t *testing.T, key string) *redisserver.Server {
	t.Helper()
	for _, n := range e.Nodes {
		_, err := n.Command("EXISTS", key)
		if err == nil {
			return n
		}
		if !strings.HasPrefix(err.Error(), "MOVED ") {
			t.Fatalf("EXISTS %s on %s: %v", key, n.Addr, err)
		}
	}
	t.Fatalf("no node serves %s", key)
	return nil
}

func newScript(name, src string) *luart.Script {
	sum := sha1.Sum([]byte(src))
	return &luart.Script{Name: name, Source: src, SHA1: hex.EncodeToString(sum[:])}
}

var (
	incr    = newScript("incr", "return redis.call('INCRBY', KEYS[1], ARGV[1])")
	refuse  = newScript("refuse", "return redis.error_reply('ERR sluice: SCRIPT: refused on purpose')")
	listGet = newScript("list_get", "return redis.call('GET', KEYS[1])")
	pair    = newScript("pair", "return {tonumber(ARGV[1]), 'two', {3}}")
)

// Commands checks each command of the Transport contract: EVALSHA and its
// NOSCRIPT, EVAL, DEL, TIME on the node of its key, several in one Send,
// error replies ServerError recognises, CLUSTER SLOTS and PING.
func Commands(t *testing.T, e *Env) {
	ctx := context.Background()
	tr := e.transport(t)
	if tr.Cluster() != e.Cluster {
		t.Fatalf("Cluster() = %v, want %v", tr.Cluster(), e.Cluster)
	}
	key := fmt.Sprintf("tt:{%d}:n", rand.Int64())
	one := func(c luart.Cmd) luart.Reply {
		r := make([]luart.Reply, 1)
		tr.Send(ctx, []luart.Cmd{c}, r)
		return r[0]
	}
	call := luart.Call{Script: incr, Keys: []string{key}, Args: []string{"2"}}
	for _, n := range e.Nodes {
		if _, err := n.Command("SCRIPT", "FLUSH"); err != nil {
			t.Fatal(err)
		}
	}
	if r := one(luart.Cmd{Op: luart.OpEvalSha, Call: call}); !r.IsNoScript() {
		t.Fatalf("EVALSHA of a script the server lacks: %v, want NOSCRIPT", r.Err())
	}
	ints := func(r luart.Reply) int64 {
		t.Helper()
		v, err := r.Int()
		if err != nil {
			t.Fatalf("reply: %v", err)
		}
		return v
	}
	if v := ints(one(luart.Cmd{Op: luart.OpEval, Call: call})); v != 2 {
		t.Fatalf("EVAL: %d, want 2", v)
	}
	if v := ints(one(luart.Cmd{Op: luart.OpEvalSha, Call: call})); v != 4 {
		t.Fatalf("EVALSHA once EVAL loaded it: %d, want 4", v)
	}

	// Several commands in one Send, each reply in its place: a script's
	// array reply, an error reply, TIME, DEL.
	cmds := []luart.Cmd{
		{Op: luart.OpEvalSha, Call: call},
		{Op: luart.OpEval, Call: luart.Call{Script: pair, Keys: []string{key}, Args: []string{"7"}}},
		{Op: luart.OpEval, Call: luart.Call{Script: refuse, Keys: []string{key}}},
		{Op: luart.OpTime, Keys: []string{key}},
		{Op: luart.OpDel, Keys: []string{key}},
		{Op: luart.OpEval, Call: luart.Call{Script: listGet, Keys: []string{key}}},
	}
	replies := make([]luart.Reply, len(cmds))
	before := time.Now().UnixMicro()
	tr.Send(ctx, cmds, replies)
	after := time.Now().UnixMicro()
	if v := ints(replies[0]); v != 6 {
		t.Fatalf("EVALSHA in a pipeline: %d, want 6", v)
	}
	d := luart.NewReplyDecoder(pair, replies[1], 3)
	if a, b, c := d.Int(0, "a"), d.String(1, "b"), d.Err(); a != 7 || b != "two" || c != nil {
		t.Fatalf("array reply: %d %q %v", a, b, c)
	}
	msg, ok := luart.ServerError(replies[2].Err())
	if !ok || !strings.Contains(msg, "sluice: SCRIPT: refused on purpose") {
		t.Fatalf("error reply: %v (ServerError %q, %v)", replies[2].Err(), msg, ok)
	}
	at, err := replies[3].Time()
	if err != nil || at < before-2_000_000 || at > after+2_000_000 {
		t.Fatalf("TIME: %d, %v; want about now (%d..%d)", at, err, before, after)
	}
	if v := ints(replies[4]); v != 1 {
		t.Fatalf("DEL: %d, want 1", v)
	}
	if err := replies[5].Err(); err != nil {
		t.Fatalf("a nil reply is a value, not an error: %v", err)
	}

	// WRONGTYPE is an error reply too.
	if _, err := e.owner(t, key).Command("LPUSH", key, "x"); err != nil {
		t.Fatal(err)
	}
	msg, ok = luart.ServerError(one(luart.Cmd{Op: luart.OpEvalSha, Call: call}).Err())
	if !ok || !strings.HasPrefix(msg, "WRONGTYPE") {
		t.Fatalf("INCRBY on a list: %q, %v; want a WRONGTYPE error reply", msg, ok)
	}

	// A client's own failure is not a server error.
	gone, cancel := context.WithCancel(ctx)
	cancel()
	r := make([]luart.Reply, 1)
	tr.Send(gone, []luart.Cmd{{Op: luart.OpEvalSha, Call: call}}, r)
	if err := r[0].Err(); err == nil || !errors.Is(err, context.Canceled) {
		t.Fatalf("Send with a cancelled context: %v, want context.Canceled", err)
	} else if _, ok := luart.ServerError(err); ok {
		t.Fatalf("a cancelled call counted as an error reply: %v", err)
	}

	if err := tr.Ping(ctx, ""); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	if !e.Cluster {
		return
	}
	slots, err := tr.Slots(ctx)
	if err != nil {
		t.Fatalf("Slots: %v", err)
	}
	covered := 0
	addrs := map[string]bool{}
	for _, s := range slots {
		covered += s.End - s.Start + 1
		addrs[s.Addr] = true
	}
	if covered != 16384 || len(addrs) != len(e.Nodes) {
		t.Fatalf("Slots: %d slots on %d primaries, want 16384 on %d: %+v", covered, len(addrs), len(e.Nodes), slots)
	}
	for _, n := range e.Nodes {
		if !addrs[n.Addr] {
			t.Fatalf("Slots names no primary %s: %+v", n.Addr, slots)
		}
		if err := tr.Ping(ctx, n.Addr); err != nil {
			t.Fatalf("Ping %s: %v", n.Addr, err)
		}
	}

	// TIME goes to the node serving its key: the clock a refund compares
	// with the scripts' own is the clock they ran on.
	for i := range 6 {
		k := fmt.Sprintf("tt:{time%d}:k", i)
		owner := e.owner(t, k)
		counts := func() map[string]int64 {
			out := map[string]int64{}
			for _, n := range e.Nodes {
				out[n.Addr] = commandCalls(t, n, "time") + commandCalls(t, n, "eval")
			}
			return out
		}
		was := counts()
		r := make([]luart.Reply, 1)
		tr.Send(ctx, []luart.Cmd{{Op: luart.OpTime, Keys: []string{k}}}, r)
		if _, err := r[0].Time(); err != nil {
			t.Fatalf("TIME for %s: %v", k, err)
		}
		now := counts()
		for _, n := range e.Nodes {
			grew := now[n.Addr] - was[n.Addr]
			// (A transport may send TIME inside a script on the key:
			// commandstats counts the EVAL and the TIME it calls.)
			if n == owner && grew == 0 || n != owner && grew != 0 {
				t.Fatalf("TIME for %s (served by %s): node %s ran %d TIME/EVAL, want them on the key's node alone", k, owner.Addr, n.Addr, grew)
			}
		}
	}
}

// commandCalls is the calls of cmd INFO commandstats reports on n.
func commandCalls(t *testing.T, n *redisserver.Server, cmd string) int64 {
	t.Helper()
	info, err := n.Command("INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":calls=")
		if !ok {
			continue
		}
		v, _, _ := strings.Cut(rest, ",")
		c, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("INFO commandstats %q: %v", line, err)
		}
		return c
	}
	return 0
}

// clock is a virtual clock the Limiter's scripts use (sluice.WithClock).
type clock struct{ us atomic.Int64 }

func (c *clock) now() time.Time                   { return time.UnixMicro(c.us.Load()) }
func (c *clock) add(d time.Duration)              { c.us.Add(d.Microseconds()) }
func newClock() *clock                            { c := &clock{}; c.us.Store(1_700_000_000_000_000); return c }
func must(l sluice.Limit, err error) sluice.Limit { return sluice.Must(l, err) }

func (e *Env) limiter(t *testing.T, opts ...sluice.Option) *sluice.Limiter {
	t.Helper()
	l, err := sluice.NewFromTransport(e.transport(t), append([]sluice.Option{sluice.WithPrefix(fmt.Sprintf("tt%d", rand.Int32()))}, opts...)...)
	if err != nil {
		t.Fatalf("NewFromTransport: %v", err)
	}
	t.Cleanup(l.Close)
	return l
}
