// Package admin is the operator's side of sluice's limits as data, the
// whole of the sluice command (cmd/sluice): checking policy files, showing
// what a request's policies have left, setting and removing per-identity
// overrides, and resetting an identity's quota.
//
// Run takes the command line and writes human-readable tables, or JSON
// with -json. Every command that reaches Redis takes -redis (a
// redis://, rediss:// or unix:// URL with an optional ACL user and
// password, more cluster seeds as ?addr=host:port, a Sentinel master as
// ?master_set=NAME; or host:port,...) and -prefix (the Limiter's
// sluice.WithPrefix, default "sluice"). Raw API keys given on the command
// line are hashed into their identity and never printed.
package admin

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/redisurl"
	"github.com/sluice-go/sluice/overrides"
)

// Exit statuses of Run.
const (
	ExitOK     = 0 // success
	ExitFailed = 1 // a check failed, or a command could not be done
	ExitUsage  = 2 // the command line is wrong
)

const usage = `usage: sluice COMMAND [flags] [arguments]

Commands:
  check FILE...        validate policy files; print every problem as file:line:col
  inspect              show every policy a request meets, with what it has left (charges nothing)
  override set|get|list|rm
                       per-identity exceptions to a policy, kept in Redis
  reset                give an identity its whole quota back under one policy

Run "sluice COMMAND -h" for a command's flags. Exit status: 0 success,
1 a check or command failed, 2 misuse.
`

// Run runs the sluice command line args (without the program name),
// writing its output to stdout and its errors to stderr, and returns the
// exit status.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return ExitUsage
	}
	e := &env{ctx: ctx, stdout: stdout, stderr: stderr}
	switch args[0] {
	case "check":
		return e.check(args[1:])
	case "inspect":
		return e.inspect(args[1:])
	case "override", "overrides":
		return e.override(args[1:])
	case "reset":
		return e.reset(args[1:])
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return ExitOK
	}
	fmt.Fprintf(stderr, "sluice: unknown command %q\n\n%s", args[0], usage)
	return ExitUsage
}

// env is one run of the command.
type env struct {
	ctx            context.Context
	stdout, stderr io.Writer
}

// failf prints a failure and returns ExitFailed.
func (e *env) failf(format string, args ...any) int {
	fmt.Fprintf(e.stderr, "sluice: "+format+"\n", args...)
	return ExitFailed
}

// flagSet is a command's flags, printed with its usage text on -h or a
// mistake.
func (e *env) flagSet(name, text string) *flag.FlagSet {
	fs := flag.NewFlagSet("sluice "+name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		fmt.Fprint(e.stderr, text)
		fmt.Fprintln(e.stderr, "\nFlags:")
		fs.PrintDefaults()
	}
	return fs
}

// parse parses args into fs; the status is ExitUsage (or ExitOK for -h)
// when the caller should stop.
func parse(fs *flag.FlagSet, args []string) (int, bool) {
	if err := fs.Parse(interleave(fs, args)); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ExitOK, false
		}
		return ExitUsage, false
	}
	return 0, true
}

// interleave moves the flags found after the first positional argument
// before it, so "sluice override get ip:1.2.3.4 -policy api" works as
// "sluice override get -policy api ip:1.2.3.4" does. A lone "--" ends the
// flags.
func interleave(fs *flag.FlagSet, args []string) []string {
	var flags, rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			rest = append(rest, args[i+1:]...)
			break
		}
		if len(a) < 2 || a[0] != '-' {
			rest = append(rest, a)
			continue
		}
		flags = append(flags, a)
		name := strings.TrimLeft(a, "-")
		if strings.Contains(name, "=") {
			continue
		}
		f := fs.Lookup(name)
		if f == nil {
			continue
		}
		if bf, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && bf.IsBoolFlag() {
			continue
		}
		if i+1 < len(args) {
			flags = append(flags, args[i+1])
			i++
		}
	}
	return append(append(flags, "--"), rest...)
}

// redisFlags are the flags of the commands that reach Redis.
type redisFlags struct {
	url     string
	prefix  string
	timeout time.Duration
}

func (r *redisFlags) add(fs *flag.FlagSet) {
	fs.StringVar(&r.url, "redis", "", "the Redis the Limiters use (required): redis://[USER:PASSWORD@]HOST:PORT (rediss:// for TLS; ?addr=HOST:PORT for more cluster seeds; ?master_set=NAME through Sentinel) or HOST:PORT,...")
	fs.StringVar(&r.prefix, "prefix", "sluice", "the key prefix the Limiters use (sluice.WithPrefix)")
	fs.DurationVar(&r.timeout, "timeout", 10*time.Second, "give up on Redis after this long")
}

// connection is an open Redis client, what the commands build on it, and
// the context bounding the command's calls (-timeout).
type connection struct {
	ctx    context.Context
	client rueidis.Client
	store  *overrides.Store
	close  func()
}

// open connects to the Redis of r. The caller closes it.
func (e *env) open(r redisFlags) (*connection, error) {
	if r.url == "" {
		return nil, errors.New("-redis is required: the Redis the Limiters use, e.g. -redis redis://127.0.0.1:6379")
	}
	opt, err := redisurl.Parse(r.url)
	if err != nil {
		return nil, err
	}
	// A command makes a few calls: tracking buys nothing.
	opt.DisableCache = true
	client, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, fmt.Errorf("cannot connect to Redis at %s: %w", strings.Join(opt.InitAddress, ","), err)
	}
	store, err := overrides.New(client, overrides.Options{Prefix: r.prefix, Cache: overrides.CacheLocal, Logger: discardLogger()})
	if err != nil {
		client.Close()
		return nil, err
	}
	ctx, cancel := e.withTimeout(r.timeout)
	return &connection{ctx: ctx, client: client, store: store, close: func() { cancel(); client.Close() }}, nil
}

// limiter is a Limiter on c that fails closed: a command must see Redis's
// answer, never a failure policy's.
func (c *connection) limiter(prefix string) (*sluice.Limiter, error) {
	return sluice.New(c.client, sluice.WithPrefix(prefix), sluice.WithFailurePolicy(sluice.FailClosed))
}

// withTimeout bounds one command's calls to Redis.
func (e *env) withTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	if d <= 0 {
		return context.WithCancel(e.ctx)
	}
	return context.WithTimeout(e.ctx, d)
}

// writeJSON prints v as indented JSON.
func (e *env) writeJSON(v any) int {
	enc := json.NewEncoder(e.stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return e.failf("%v", err)
	}
	return ExitOK
}

// table prints rows under a header, columns aligned.
func (e *env) table(header []string, rows [][]string) {
	width := make([]int, len(header))
	for _, row := range append([][]string{header}, rows...) {
		for i, c := range row {
			width[i] = max(width[i], len(c))
		}
	}
	line := func(row []string) {
		var b strings.Builder
		for i, c := range row {
			if i == len(row)-1 {
				b.WriteString(c)
				break
			}
			b.WriteString(c)
			b.WriteString(strings.Repeat(" ", width[i]-len(c)+2))
		}
		fmt.Fprintln(e.stdout, strings.TrimRight(b.String(), " "))
	}
	line(header)
	for _, row := range rows {
		line(row)
	}
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
