package sluice

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice/internal/keyslot"
	"github.com/sluice-go/sluice/internal/redisserver"
)

// The least-privilege ACL user of docs/operations.md, for the key prefix
// "sluice": the commands the Limiter and rueidis send, and the commands
// its scripts call (Redis checks those against the caller's ACL too).
// HELLO (with AUTH) needs no permission. rueidis sends CLUSTER SLOTS on
// every NewClient to tell a cluster from a standalone server (a refusal
// only costs an ACL LOG entry there), CLUSTER SHARDS instead to servers
// of version 8 or later, and CLIENT SETINFO to servers of 7.2 or later
// (a subcommand 7.0 does not know, so the rule adds it only there); on a
// cluster it and the Limiter need the slot map, and rueidis sends ASKING
// to follow a slot being migrated.
var (
	aclCommands       = []string{"+evalsha", "+eval", "+del", "+ping", "+cluster|slots", "+cluster|shards"}
	aclSetinfo        = "+client|setinfo" // Redis 7.2 and later, Valkey
	aclClusterCommand = []string{"+asking"}
	aclScriptCommands = []string{"+time", "+get", "+mget", "+set", "+pexpire", "+pttl",
		"+zadd", "+zcard", "+zcount", "+zrange", "+zrangebyscore", "+zrem", "+zremrangebyscore", "+zscore"}
)

// aclRule is the ACL SETUSER rule (after the user name) for password and
// key prefix, on a server of the given version (from HELLO).
func aclRule(password, prefix string, cluster bool, version string) []string {
	rule := []string{"on", ">" + password, "resetkeys", "~" + prefix + ":*", "resetchannels", "-@all"}
	rule = append(rule, aclCommands...)
	if versionAtLeast(version, 7, 2) {
		rule = append(rule, aclSetinfo)
	}
	if cluster {
		rule = append(rule, aclClusterCommand...)
	}
	return append(rule, aclScriptCommands...)
}

// helloVersion is the server's name and version as HELLO reports them
// (INFO's redis_version is 7.2.4 on every Valkey; HELLO tells the truth).
func helloVersion(t *testing.T, s *redisserver.Server) (server, version string) {
	t.Helper()
	reply, err := s.Command("HELLO", "2")
	if err != nil {
		t.Fatalf("HELLO: %v", err)
	}
	f := strings.Split(reply, "\n")
	for i := 0; i+1 < len(f); i += 2 {
		switch f[i] {
		case "server":
			server = f[i+1]
		case "version":
			version = f[i+1]
		}
	}
	if server == "" || version == "" {
		t.Fatalf("HELLO 2 = %q: no server or version", reply)
	}
	return server, version
}

// versionAtLeast reports whether version (major.minor.patch) is at least
// major.minor.
func versionAtLeast(version string, major, minor int) bool {
	var ma, mi int
	if _, err := fmt.Sscanf(version, "%d.%d", &ma, &mi); err != nil {
		return false
	}
	return ma > major || ma == major && mi >= minor
}

// exerciseLimiter makes every kind of call the Limiter has, each of which
// must be decided by Redis.
func exerciseLimiter(t *testing.T, l *Limiter, id string) {
	t.Helper()
	ctx := context.Background()
	for _, lim := range []Limit{
		Must(GCRA(10, time.Hour, 10)), Must(TokenBucket(10, time.Hour, 10)), Must(FixedWindow(10, time.Hour)),
		Must(SlidingLog(10, time.Hour)), Must(SlidingWindow(10, time.Hour)),
	} {
		for name, call := range map[string]func() (Result, error){
			"Allow":   func() (Result, error) { return l.Allow(ctx, id, lim) },
			"Peek":    func() (Result, error) { return l.Peek(ctx, id, lim) },
			"AllowN0": func() (Result, error) { return l.AllowN(ctx, id, lim, 0) },
		} {
			if r, err := call(); err != nil || r.Degraded || !r.Allowed {
				t.Fatalf("%s %s: %+v, %v", name, lim.Name, r, err)
			}
		}
		if err := l.Reset(ctx, id, lim); err != nil {
			t.Fatalf("Reset %s: %v", lim.Name, err)
		}
	}
	for _, pair := range [][2]Limit{
		{Must(GCRA(10, time.Hour, 10)), Must(GCRA(100, 24*time.Hour, 100))},
		{Must(SlidingWindow(10, time.Hour)), Must(SlidingWindow(100, 24*time.Hour))},
	} {
		if r, err := l.AllowAll(ctx, id, []Limit{pair[0], pair[1]}, 1); err != nil || r.Degraded || !r.Allowed {
			t.Fatalf("AllowAll %s, %s: %+v, %v", pair[0].Name, pair[1].Name, r, err)
		}
	}
	conc := Must(Concurrency(2, time.Minute))
	lease, r, err := l.Acquire(ctx, id, conc)
	if err != nil || r.Degraded || !r.Allowed {
		t.Fatalf("Acquire: %+v, %v", r, err)
	}
	if r, err := l.Extend(ctx, lease); err != nil || r.Degraded || !r.Allowed {
		t.Fatalf("Extend: %+v, %v", r, err)
	}
	if err := l.Release(ctx, lease); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

// TLS (rediss://) and a least-privilege ACL user, with requirepass for the
// default user, on a real server: the Limiter works through the TLS port
// as that user with every call it has (EVAL included, after SCRIPT FLUSH),
// Redis logs no ACL denial (the background PING included), and a Limiter
// with another prefix is refused by Redis (NOPERM): its decisions come
// from the failure policy and Reset returns Redis's error.
func TestTLSAndACL(t *testing.T) {
	t.Parallel() // its own servers; no timing it asserts depends on a quiet machine
	srv := redisserver.StartTLS(t, "--requirepass", "admin-secret")
	srv.SetAuth("default", "admin-secret")
	server, version := helloVersion(t, srv.Server)
	t.Logf("%s %s", server, version)
	if _, err := srv.Command(append([]string{"ACL", "SETUSER", "sluice"}, aclRule("user-secret", "sluice", false, version)...)...); err != nil {
		t.Fatalf("ACL SETUSER: %v", err)
	}
	url := "rediss://sluice:user-secret@" + srv.TLSAddr

	// Without the CA the handshake fails: the connection really is TLS.
	opt, err := rueidis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	opt.DisableCache = true
	if c, err := rueidis.NewClient(opt); err == nil {
		c.Close()
		t.Fatal("a client without the test CA connected")
	} else if !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("without the CA: %v; want a certificate error", err)
	}

	opt, _ = rueidis.ParseURL(url)
	opt.TLSConfig.RootCAs = srv.ClientConfig.RootCAs
	opt.DisableCache = true
	c, err := rueidis.NewClient(opt)
	if err != nil {
		t.Fatalf("rediss:// as the ACL user: %v", err)
	}
	defer c.Close()
	if _, err := srv.Command("SCRIPT", "FLUSH"); err != nil { // every script goes through NOSCRIPT → EVAL
		t.Fatal(err)
	}
	pings := commandCalls(t, srv.Server, "ping")
	l, err := New(c, quiet...)
	if err != nil {
		t.Fatal(err)
	}
	exerciseLimiter(t, l, "tls-user")
	if n := commandCalls(t, srv.Server, "eval"); n == 0 {
		t.Fatal("no EVAL: the NOSCRIPT path was not exercised")
	}
	// rueidis pings an idle connection every second.
	if _, ok := waitFor(10*time.Second, func() bool { return commandCalls(t, srv.Server, "ping") > pings }); !ok {
		log, _ := srv.Command("ACL", "LOG")
		t.Fatalf("no background PING answered within 10s; ACL LOG: %q", log)
	}
	if log, err := srv.Command("ACL", "LOG"); err != nil || log != "" {
		t.Fatalf("ACL LOG after the Limiter's calls: %q, %v; want no denial", log, err)
	}

	// A prefix outside the user's key pattern.
	for _, policy := range []FailurePolicy{FailLocal, FailClosed} {
		other, err := New(c, WithPrefix("other"), WithFailurePolicy(policy), WithTimeout(time.Minute), WithLogger(nil))
		if err != nil {
			t.Fatal(err)
		}
		lim := Must(GCRA(10, time.Hour, 10))
		r, err := other.Allow(context.Background(), "u", lim)
		if err != nil || !r.Degraded || r.Allowed != (policy == FailLocal) {
			t.Fatalf("%v, prefix other: %+v, %v; want a degraded decision of the policy", policy, r, err)
		}
		err = other.Reset(context.Background(), "u", lim)
		if err == nil || !strings.Contains(err.Error(), "NOPERM") {
			t.Fatalf("Reset with prefix other: %v; want Redis's NOPERM", err)
		}
		t.Logf("%v, WithPrefix(\"other\"): Allow %+v; Reset: %v", policy, r, err)
	}
	log, err := srv.Command("ACL", "LOG")
	if err != nil || !strings.Contains(log, "other:{u}:") || !strings.Contains(log, "reason\nkey") {
		t.Fatalf("ACL LOG after calls with prefix other: %q, %v; want key denials", log, err)
	}
}

// The same ACL user on a 3-master cluster (set on every node), the slot
// map (CLUSTER SLOTS) and a slot being migrated (an ASK redirect, so
// rueidis sends ASKING) included.
func TestACLCluster(t *testing.T) {
	t.Parallel() // its own servers; no timing it asserts depends on a quiet machine
	cl := redisserver.StartCluster(t, 3)
	_, version := helloVersion(t, cl.Nodes[0])
	for _, n := range cl.Nodes {
		if _, err := n.Command(append([]string{"ACL", "SETUSER", "sluice"}, aclRule("user-secret", "sluice", true, version)...)...); err != nil {
			t.Fatalf("ACL SETUSER on %s: %v", n.Addr, err)
		}
	}
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: cl.Addrs(), Username: "sluice", Password: "user-secret", DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// A timeout a refused ASKING runs into (rueidis retries it), short
	// enough for this test to fail in time.
	l, err := New(c, WithTimeout(10*time.Second), WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 6; i++ {
		exerciseLimiter(t, l, fmt.Sprintf("acl-%d", i))
	}
	if _, ok := waitFor(10*time.Second, func() bool { return len(l.Health().Nodes) == 1+len(cl.Nodes) }); !ok {
		t.Fatalf("the Limiter never loaded the slot map as the ACL user: %+v", l.Health())
	}

	// Mark the slot of a fresh identity as migrating from its owner to
	// another node: its key does not exist at the owner, which answers
	// ASK; rueidis follows with ASKING to the importing node.
	owner := slotOwners(t, cl)
	id := "acl-ask"
	slot := keyslot.Of(l.Key(id, Must(GCRA(10, time.Hour, 10))))
	src, dst := cl.Nodes[owner[slot]], cl.Nodes[(owner[slot]+1)%len(cl.Nodes)]
	srcID, _ := src.Command("CLUSTER", "MYID")
	dstID, _ := dst.Command("CLUSTER", "MYID")
	if _, err := dst.Command("CLUSTER", "SETSLOT", fmt.Sprint(slot), "IMPORTING", srcID); err != nil {
		t.Fatal(err)
	}
	if _, err := src.Command("CLUSTER", "SETSLOT", fmt.Sprint(slot), "MIGRATING", dstID); err != nil {
		t.Fatal(err)
	}
	asking := commandCalls(t, dst, "asking")
	if r, err := l.Allow(context.Background(), id, Must(GCRA(10, time.Hour, 10))); err != nil || r.Degraded || !r.Allowed {
		t.Fatalf("Allow on a migrating slot: %+v, %v", r, err)
	}
	if commandCalls(t, dst, "asking") == asking {
		t.Fatal("no ASKING reached the importing node: the ASK path was not exercised")
	}
	for _, n := range cl.Nodes {
		if log, err := n.Command("ACL", "LOG"); err != nil || log != "" {
			t.Fatalf("ACL LOG on %s: %q, %v; want no denial", n.Addr, log, err)
		}
	}
	if _, err := l.Allow(context.Background(), id, Must(GCRA(10, time.Hour, 10))); errors.Is(err, ErrInvalidLimit) {
		t.Fatal(err)
	}
}
