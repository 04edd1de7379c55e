package verify

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/yuin/gopher-lua/ast"

	"github.com/sluice-go/sluice/gen"
)

// Without a step file, vet explores a script with made-up runs: every
// combination of a value profile (typical, zero, one, large), optional
// arguments unset and set, and for a variadic key or a list argument 0, 1
// and a few elements. Each combination runs on an empty keyspace, again on
// what that run left (at the same instant, then a second later), after the
// other combinations of its profile, and on keyspaces seeded with values
// of the types the script's commands use.

// valueProfile gives the made-up value of an argument at a position
// (counting every ARGV entry, the list's elements included).
type valueProfile struct {
	name   string
	ints   []string
	floats []string
	strs   []string
	bool   string
}

func (p valueProfile) value(t gen.Type, pos int) string {
	pick := func(vs []string) string { return vs[pos%len(vs)] }
	switch t {
	case gen.Float:
		return pick(p.floats)
	case gen.String:
		return pick(p.strs)
	case gen.Bool:
		return p.bool
	}
	return pick(p.ints)
}

// valueProfiles: the typical values differ from position to position, so
// that arithmetic on several arguments gives fractions where a script can
// produce them; the large ones are time spans in µs and ms.
var valueProfiles = [...]valueProfile{
	{"typical", []string{"10", "3", "4", "7", "25", "6", "9", "2", "12"}, []string{"2.5", "0.75", "10.25"}, []string{"x", "y", "z"}, "1"},
	{"zero", []string{"0"}, []string{"0"}, []string{""}, "0"},
	{"one", []string{"1"}, []string{"1"}, []string{"1"}, "1"},
	{"large", []string{"1000000", "3600000000", "86400000000", "604800000", "1000000007"}, []string{"1000000.5"}, []string{strings.Repeat("x", 100)}, "1"},
}

// inputShape is what a script takes: its fixed keys and arguments, and its
// variadic key and list argument when it has them.
type inputShape struct {
	keys   []string // names of the fixed keys
	varKey string   // name of the variadic key; "" when none
	args   []argShape
	list   *argShape
}

type argShape struct {
	typ      gen.Type
	optional bool
}

// madeUpInput is the KEYS and ARGV of one made-up run.
type madeUpInput struct {
	keys, args []string
	profile    int // index in valueProfiles
}

// shape returns the inputs of the script: from its annotations, or for a
// script without them, from the highest literal KEYS[n] and ARGV[n].
func (f *vetFile) shape(chunk []ast.Stmt) inputShape {
	var sh inputShape
	if s := f.script; s != nil {
		for _, k := range s.Keys {
			if k.Variadic {
				sh.varKey = k.Name
			} else {
				sh.keys = append(sh.keys, k.Name)
			}
		}
		for _, a := range s.Args {
			as := argShape{typ: a.Type, optional: a.Optional}
			if a.Variadic {
				sh.list = &as
			} else {
				sh.args = append(sh.args, as)
			}
		}
		return sh
	}
	l := newLinter(&vetFile{})
	l.block(chunk)
	for i := 1; i <= maxIndex(l.keys.lines); i++ {
		sh.keys = append(sh.keys, "k"+strconv.Itoa(i))
	}
	for i := 1; i <= maxIndex(l.args.lines); i++ {
		sh.args = append(sh.args, argShape{typ: gen.Int})
	}
	return sh
}

// inputs lists the made-up runs' KEYS and ARGV, typical values first.
func (sh inputShape) inputs() []madeUpInput {
	keyCounts := []int{0}
	if sh.varKey != "" {
		keyCounts = []int{1, 3, 0}
	}
	optional := []bool{false}
	for _, a := range sh.args {
		if a.optional {
			optional = []bool{false, true}
			break
		}
	}
	var out []madeUpInput
	for pi, p := range valueProfiles {
		for _, setOptional := range optional {
			for _, nk := range keyCounts {
				keys := make([]string, 0, len(sh.keys)+nk)
				for _, k := range sh.keys {
					keys = append(keys, "{vet}:"+k)
				}
				for i := 1; i <= nk; i++ {
					keys = append(keys, "{vet}:"+sh.varKey+":"+strconv.Itoa(i))
				}
				lens := []int{0}
				if sh.list != nil {
					// One, two or three list elements per variadic key, as
					// well as none, one and a few.
					lens = []int{0, 1, 3, nk, 2 * nk, 3 * nk}
					slices.Sort(lens)
					lens = slices.Compact(lens)
				}
				for _, nl := range lens {
					args := make([]string, 0, len(sh.args)+nl)
					for i, a := range sh.args {
						if a.optional && !setOptional {
							args = append(args, "")
						} else {
							args = append(args, p.value(a.typ, i))
						}
					}
					for i := 0; i < nl; i++ {
						args = append(args, p.value(sh.list.typ, len(sh.args)+i))
					}
					out = append(out, madeUpInput{keys: keys, args: args, profile: pi})
				}
			}
		}
	}
	return out
}

// explore runs the script with made-up inputs and checks every run. It
// returns false when a typical run did not finish (the finding is added).
func (f *vetFile) explore(ctx context.Context, sb *Sandbox, script string, chunk []ast.Stmt) {
	inputs := f.shape(chunk).inputs()
	var runs []*Run
	abandoned := map[int]bool{} // profiles whose runs do not finish
	stopped := false
	run := func(in madeUpInput, at time.Duration, valueChecks bool) {
		if stopped || abandoned[in.profile] {
			return
		}
		sb.Timeout = vetLoopTimeout
		if in.profile != 0 {
			// Large values may make a loop long; only a typical run that
			// never ends is a finding.
			sb.Timeout = vetLoopTimeout / 4
		}
		_ = sb.SetTime(ctx, StartTime.Add(at))
		before := sb.expiries()
		r, err := sb.Run(ctx, script, in.keys, in.args)
		if err != nil {
			if in.profile == 0 {
				f.add(CheckSyntax, 0, 0, "the script did not finish within %v in the sandbox (an endless loop?)", sb.Timeout)
				stopped = true
			}
			abandoned[in.profile] = true
			return
		}
		runs = append(runs, r)
		f.checkRun(r, before, sb.expiries(), valueChecks)
	}
	for _, in := range inputs {
		_ = sb.Reset(ctx)
		run(in, 0, true)
		run(in, 0, true)
		run(in, time.Second, true)
	}
	// Each profile's inputs one after the other on one keyspace, at one
	// instant: what a run with optional arguments unset wrote, a run with
	// them set finds, and so on.
	for pi := range valueProfiles {
		_ = sb.Reset(ctx)
		for _, in := range inputs {
			if in.profile == pi {
				run(in, 0, true)
			}
		}
	}
	seeds := seedsFor(runs)
	if len(seeds) == 0 {
		return
	}
	for _, in := range inputs {
		// Seeded with small integers, then with the run's own arguments
		// (the first field a command names gets ARGV[1], the second ARGV[2]
		// and so on), so that comparisons with arguments can come out true.
		// What an argument-valued seed leads to depends on values no run of
		// the script would have written: the checks of reply values
		// (float-reply, reply-shape) are left out of those runs.
		_ = sb.Reset(ctx)
		seedKeyspace(ctx, sb, seeds, func(int) string { return "7" })
		run(in, 0, true)
		_ = sb.Reset(ctx)
		seedKeyspace(ctx, sb, seeds, func(i int) string { return argAt(in.args, i) })
		run(in, 0, false)
	}
}

// argAt returns args[i] when it is set, else the first non-empty argument,
// else "7".
func argAt(args []string, i int) string {
	if i < len(args) && args[i] != "" {
		return args[i]
	}
	for _, a := range args {
		if a != "" {
			return a
		}
	}
	return "7"
}

// seed is what the runs tell of one key: the type its commands imply, and
// the fields, members or consumer groups they name.
type seed struct {
	key   string
	typ   string // string, bitmap, hash, list, set, zset, stream, hll
	names []string
}

// seedsFor infers the keys the runs touched and their types, in the order
// first touched.
func seedsFor(runs []*Run) []*seed {
	var out []*seed
	byKey := map[string]*seed{}
	for _, r := range runs {
		for _, c := range r.Calls {
			typ := commandType(c.Name())
			if typ == "" {
				continue
			}
			for _, k := range commandKeys(c.Args) {
				s := byKey[k]
				if s == nil {
					s = &seed{key: k, typ: typ}
					byKey[k] = s
					out = append(out, s)
				}
				if s.typ != typ {
					continue
				}
				for _, n := range namesIn(c.Args) {
					if !slices.Contains(s.names, n) && len(s.names) < 16 {
						s.names = append(s.names, n)
					}
				}
			}
		}
	}
	return out
}

// commandType is the type of value a command works on, "" when it works on
// any (DEL, EXPIRE, TYPE...) or is not known.
func commandType(name string) string {
	switch name {
	case "GET", "SET", "SETNX", "SETEX", "PSETEX", "GETSET", "GETDEL", "GETEX", "INCR", "INCRBY",
		"DECR", "DECRBY", "INCRBYFLOAT", "APPEND", "STRLEN", "GETRANGE", "SETRANGE", "SUBSTR",
		"MGET", "MSET", "MSETNX", "LCS":
		return "string"
	case "SETBIT", "GETBIT", "BITCOUNT", "BITPOS", "BITFIELD", "BITFIELD_RO":
		return "bitmap"
	case "PFADD", "PFCOUNT", "PFMERGE":
		return "hll"
	case "RPOPLPUSH", "RPUSH", "RPUSHX", "RPOP":
		return "list"
	}
	switch {
	case strings.HasPrefix(name, "H"):
		return "hash"
	case strings.HasPrefix(name, "L"):
		return "list"
	case strings.HasPrefix(name, "S") && name != "SORT" && name != "SORT_RO":
		return "set"
	case strings.HasPrefix(name, "Z"), strings.HasPrefix(name, "GEO"):
		return "zset"
	case strings.HasPrefix(name, "X"):
		return "stream"
	}
	return ""
}

// namesIn returns the hash fields, set or sorted set members, or stream
// consumer groups a command names.
func namesIn(args []string) []string {
	name := strings.ToUpper(args[0])
	at := func(i int) []string {
		if i < len(args) {
			return []string{args[i]}
		}
		return nil
	}
	from := func(i, step int) []string {
		var out []string
		for ; i < len(args); i += step {
			out = append(out, args[i])
		}
		return out
	}
	switch name {
	case "HGET", "HEXISTS", "HSTRLEN", "HINCRBY", "HINCRBYFLOAT", "HSETNX", "ZSCORE", "ZRANK", "ZREVRANK", "SISMEMBER":
		return at(2)
	case "HMGET", "HDEL", "ZMSCORE", "ZREM", "SMISMEMBER", "SREM", "SADD":
		return from(2, 1)
	case "HSET", "HMSET":
		return from(2, 2)
	case "ZINCRBY":
		return at(3)
	case "ZADD":
		i := 2
		for i < len(args) && slices.Contains([]string{"NX", "XX", "GT", "LT", "CH", "INCR"}, strings.ToUpper(args[i])) {
			i++
		}
		return from(i+1, 2)
	case "XAUTOCLAIM", "XCLAIM", "XACK", "XPENDING":
		return at(2)
	case "XGROUP":
		return at(3)
	case "XREADGROUP":
		return at(2)
	}
	return nil
}

// seedKeyspace writes a value of its type to every seeded key, each with a
// TTL of an hour, as an earlier run of a script that gives its keys TTLs
// would leave them. value(i) is the value of the i-th field or item.
func seedKeyspace(ctx context.Context, sb *Sandbox, seeds []*seed, value func(i int) string) {
	do := func(args ...string) { _, _ = sb.Do(ctx, args...) }
	for _, s := range seeds {
		names := s.names
		if len(names) == 0 {
			names = []string{"f"}
		}
		v := value(0)
		switch s.typ {
		case "string":
			do("SET", s.key, v)
		case "bitmap":
			bits := v
			if v == "7" {
				bits = "\xa5\xa5\xa5\xa5\xa5\xa5\xa5\xa5" // every other bit set
			}
			do("SET", s.key, bits)
		case "hll":
			do("PFADD", s.key, v, "a", "b")
		case "list":
			do("RPUSH", s.key, v, value(1))
		case "hash":
			cmd := []string{"HSET", s.key}
			for i, n := range names {
				cmd = append(cmd, n, value(i))
			}
			do(cmd...)
		case "set":
			do(append([]string{"SADD", s.key, v}, names...)...)
		case "zset":
			cmd := []string{"ZADD", s.key}
			for i, n := range names {
				cmd = append(cmd, strconv.Itoa(7+i), n)
			}
			do(cmd...)
		case "stream":
			do("XADD", s.key, "1-1", "f", v)
			do("XADD", s.key, "1-2", "f", value(1))
			for _, g := range s.names {
				do("XGROUP", "CREATE", s.key, g, "0")
				do("XREADGROUP", "GROUP", g, "vet", "COUNT", "1", "STREAMS", s.key, ">")
			}
		}
		do("PEXPIRE", s.key, "3600000")
	}
}
