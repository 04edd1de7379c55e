package luart

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/redis/rueidis"
)

// Transport is what a sluice Limiter needs of a Redis client: a handful of
// commands, sent in pipelined writes, and the cluster's slot map. Rueidis is
// the Transport of a rueidis client; module transport/goredis has one for a
// go-redis v9 client. A Transport must be safe for concurrent use.
//
// A Transport sends each command once. A client that sends a command again
// after its connection failed (go-redis' MaxRetries) could run a script
// that charges a quota twice; such a client must be configured not to.
type Transport interface {
	// Send sends cmds in one pipelined write and sets replies[i] to the
	// reply of cmds[i] (len(replies) >= len(cmds)). The commands of one
	// Send are on keys the Limiter takes to be on one node; on a cluster
	// they may span several hash slots (and, while the slot map is
	// stale, nodes), so a cluster client must route each command by its
	// own slot, keeping the order of the commands of one slot. An error
	// reply of the server is
	// the Reply's error, of a type ServerError recognises (one with a
	// RedisError method will do); so is the client's own failure (a lost
	// connection, ctx's end), of any other type. A Send whose ctx has
	// already ended sends nothing. Send returns once every reply is set.
	Send(ctx context.Context, cmds []Cmd, replies []Reply)
	// Cluster reports whether the client talks to a Redis Cluster, whose
	// slots Slots maps to its primaries.
	Cluster() bool
	// Slots reads the cluster's slot map (CLUSTER SLOTS).
	Slots(ctx context.Context) ([]SlotRange, error)
	// Ping sends PING to the primary at addr (as Slots names it) or, with
	// addr "" or one the client does not know, to a node the client
	// chooses. It returns the reply's error: an error reply (LOADING,
	// NOAUTH) is one ServerError recognises.
	Ping(ctx context.Context, addr string) error
}

// Op is the command a Cmd sends.
type Op uint8

const (
	OpEvalSha Op = iota // the Call as EVALSHA (EVALSHA_RO for a read-only script)
	OpEval              // the Call as EVAL (EVAL_RO), which also loads the script
	OpDel               // DEL of Keys
	OpTime              // TIME, on the node that serves the slot of Keys[0]
)

// Cmd is one command a Transport sends.
type Cmd struct {
	Op   Op
	Call Call     // OpEvalSha, OpEval
	Keys []string // OpDel, OpTime
}

// SlotRange is one range of a cluster's hash slots, Start to End
// inclusive, and the address (host:port) of the primary serving it.
type SlotRange struct {
	Start, End int
	Addr       string
}

// ServerError reports whether err is an error reply of the server (as
// opposed to the client failing to get a reply) and its text: a
// *rueidis.RedisError, or an error with a RedisError method as go-redis'
// are.
func ServerError(err error) (msg string, ok bool) {
	if err == nil {
		return "", false
	}
	var re *rueidis.RedisError
	if errors.As(err, &re) {
		return re.Error(), true
	}
	var ge interface {
		error
		RedisError()
	}
	if errors.As(err, &ge) {
		return ge.Error(), true
	}
	return "", false
}

// Time reads a TIME reply as µs since the Unix epoch.
func (r Reply) Time() (int64, error) {
	var s, us int64
	var err error
	if r.value {
		if r.err != nil {
			return 0, r.err
		}
		a, ok := r.val.([]any)
		if !ok || len(a) != 2 {
			return 0, ErrMalformedReply
		}
		s, err = timePart(a[0])
		if err == nil {
			us, err = timePart(a[1])
		}
	} else {
		a, aerr := r.res.ToArray()
		if aerr != nil {
			return 0, aerr
		}
		if len(a) != 2 {
			return 0, ErrMalformedReply
		}
		s, err = a[0].AsInt64()
		if err == nil {
			us, err = a[1].AsInt64()
		}
	}
	if err != nil {
		return 0, err
	}
	return s*1_000_000 + us, nil
}

// Int reads an integer reply (DEL's, or a script's that returns a number).
func (r Reply) Int() (int64, error) {
	if !r.value {
		return r.res.AsInt64()
	}
	if r.err != nil {
		return 0, r.err
	}
	if v, ok := r.val.(int64); ok {
		return v, nil
	}
	return 0, fmt.Errorf("%w: want an integer, got %s", ErrMalformedReply, describeValue(r.val))
}

// timePart is one element of a TIME reply read as Go values: a string, or
// an integer.
func timePart(v any) (int64, error) {
	switch v := v.(type) {
	case string:
		return strconv.ParseInt(v, 10, 64)
	case int64:
		return v, nil
	}
	return 0, ErrMalformedReply
}

// Rueidis is the Transport of a rueidis client. A Cmd becomes one rueidis
// command; several go in one DoMulti, which rueidis writes to the node of
// their slot.
func Rueidis(client rueidis.Client) Transport {
	return &rueidisTransport{c: client, time: client.B().Time().Build().Pin(), cluster: client.Mode() == rueidis.ClientModeCluster}
}

type rueidisTransport struct {
	c       rueidis.Client
	time    rueidis.Completed // TIME, built once (pinned: never recycled)
	cluster bool
}

// completed holds the commands of one DoMulti, kept for the next.
var completed = sync.Pool{New: func() any { return new([]rueidis.Completed) }}

func (t *rueidisTransport) Send(ctx context.Context, cmds []Cmd, replies []Reply) {
	if len(cmds) == 1 {
		replies[0] = FromRueidis(t.c.Do(ctx, t.build(&cmds[0])))
		return
	}
	p := completed.Get().(*[]rueidis.Completed)
	built := (*p)[:0]
	for i := range cmds {
		built = append(built, t.build(&cmds[i]))
	}
	for i, r := range t.c.DoMulti(ctx, built...) {
		replies[i] = FromRueidis(r)
	}
	clear(built) // sent: rueidis recycles them
	*p = built[:0]
	completed.Put(p)
}

func (t *rueidisTransport) build(c *Cmd) rueidis.Completed {
	switch c.Op {
	case OpEval:
		return c.Call.eval(t.c)
	case OpDel:
		return t.c.B().Del().Key(c.Keys...).Build()
	case OpTime:
		if len(c.Keys) > 0 {
			return t.time.SetSlot(c.Keys[0])
		}
		return t.time
	}
	return c.Call.evalsha(t.c)
}

func (t *rueidisTransport) Cluster() bool { return t.cluster }

func (t *rueidisTransport) Ping(ctx context.Context, addr string) error {
	var c rueidis.CommandClient = t.c
	if t.cluster && addr != "" {
		if nc := t.c.Nodes()[addr]; nc != nil {
			c = nc
		}
	}
	return c.Do(ctx, c.B().Ping().Build()).Error()
}

// Slots reads CLUSTER SLOTS: [[start, end, [host, port, id, …], replicas…], …].
func (t *rueidisTransport) Slots(ctx context.Context) ([]SlotRange, error) {
	ranges, err := t.c.Do(ctx, t.c.B().ClusterSlots().Build()).ToArray()
	if err != nil {
		return nil, err
	}
	out := make([]SlotRange, 0, len(ranges))
	for _, rg := range ranges {
		f, err := rg.ToArray()
		if err != nil || len(f) < 3 {
			continue
		}
		start, err1 := f[0].AsInt64()
		end, err2 := f[1].AsInt64()
		primary, err3 := f[2].ToArray()
		if err1 != nil || err2 != nil || err3 != nil || len(primary) < 2 {
			continue
		}
		host, _ := primary[0].ToString()
		port, _ := primary[1].AsInt64()
		out = append(out, SlotRange{Start: int(start), End: int(end), Addr: host + ":" + strconv.FormatInt(port, 10)})
	}
	return out, nil
}
