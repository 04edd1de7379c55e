package verify

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
)

// Env is one place a script runs: the Sandbox, a miniredis server
// (MiniredisEnv) or a real Redis (RedisEnv). Step files and the
// differential runner work on any of them.
type Env interface {
	// Name names the environment in reports.
	Name() string
	// Eval runs script with keys and args (EVAL). A script's error is an
	// error reply; the Go error is for failures to run it at all.
	Eval(ctx context.Context, script string, keys, args []string) (Reply, error)
	// Do runs one command outside any script, for setup and inspection.
	Do(ctx context.Context, args ...string) (Reply, error)
	// SetTime moves the clock to t: TIME and key expiry where VirtualClock
	// is true; key expiry alone, approximately, on a real server.
	SetTime(ctx context.Context, t time.Time) error
	// VirtualClock reports whether TIME follows SetTime and TTLs follow it
	// exactly.
	VirtualClock() bool
	// Reset empties the keyspace and moves the clock back to StartTime.
	Reset(ctx context.Context) error
	// Close releases the environment.
	Close() error
}

var (
	_ Env = (*Sandbox)(nil)
	_ Env = (*MiniredisEnv)(nil)
	_ Env = (*RedisEnv)(nil)
)

// MiniredisEnv runs scripts in a miniredis server (miniredis' own Lua
// interpreter), listening on a free 127.0.0.1 port, with a settable clock
// that TIME and TTLs follow.
type MiniredisEnv struct {
	m    *miniredis.Miniredis
	conn *respConn
	mu   sync.Mutex
	now  time.Time
}

// NewMiniredis starts a miniredis server with its clock at StartTime.
func NewMiniredis() (*MiniredisEnv, error) {
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		return nil, fmt.Errorf("verify: start miniredis: %w", err)
	}
	conn, err := dialRESP(context.Background(), m.Addr())
	if err != nil {
		m.Close()
		return nil, err
	}
	e := &MiniredisEnv{m: m, conn: conn}
	e.setTime(StartTime.Time())
	m.ClockTTL(true)
	return e, nil
}

// Name implements Env.
func (e *MiniredisEnv) Name() string { return "miniredis" }

// Addr is the server's host:port.
func (e *MiniredisEnv) Addr() string { return e.m.Addr() }

// Miniredis returns the server.
func (e *MiniredisEnv) Miniredis() *miniredis.Miniredis { return e.m }

// VirtualClock implements Env.
func (e *MiniredisEnv) VirtualClock() bool { return true }

// Now returns the server clock.
func (e *MiniredisEnv) Now() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.now
}

// SetTime implements Env.
func (e *MiniredisEnv) SetTime(_ context.Context, t time.Time) error {
	e.setTime(t)
	return nil
}

// Advance moves the clock forward by d.
func (e *MiniredisEnv) Advance(d time.Duration) {
	e.setTime(e.Now().Add(d))
}

func (e *MiniredisEnv) setTime(t time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.now = t
	e.m.SetTime(t)
}

// Eval implements Env.
func (e *MiniredisEnv) Eval(ctx context.Context, script string, keys, args []string) (Reply, error) {
	return e.conn.do(ctx, evalArgs(script, keys, args)...)
}

// Do implements Env.
func (e *MiniredisEnv) Do(ctx context.Context, args ...string) (Reply, error) {
	return e.conn.do(ctx, args...)
}

// Reset implements Env.
func (e *MiniredisEnv) Reset(context.Context) error {
	e.m.FlushAll()
	e.m.ClockTTL(false)
	e.setTime(StartTime.Time())
	e.m.ClockTTL(true)
	return nil
}

// Close implements Env.
func (e *MiniredisEnv) Close() error {
	err := e.conn.close()
	e.m.Close()
	return err
}

func evalArgs(script string, keys, args []string) []string {
	out := make([]string, 0, 3+len(keys)+len(args))
	out = append(out, "EVAL", script, strconv.Itoa(len(keys)))
	out = append(out, keys...)
	return append(out, args...)
}

// RedisEnv runs scripts on a real Redis server, in one database that must
// be empty when it connects; Reset and Close empty it again (FLUSHDB), so
// nothing else may use that database meanwhile.
//
// A real server's TIME cannot be set. SetTime emulates the passing of time
// for TTLs: it moves every key's TTL by the virtual time elapsed minus the
// real time elapsed, so TTLs follow the virtual clock within a millisecond
// or two. RunSteps does better: it sets every key's TTL from a reference
// sandbox in the same transaction as each step's call. Steps that read TIME
// are not compared on a real server; pass the time as an argument instead.
type RedisEnv struct {
	addr string
	db   int
	conn *respConn

	mu       sync.Mutex
	virtual  time.Time     // the emulated clock
	realSync time.Time     // wall time when virtual was last synchronised
	carry    time.Duration // shift not applied yet (under 1ms)
}

// TTLTolerance is how far a TTL read on a real server after a step may be
// from the expected one, on top of the real time elapsed since the step
// began (which RunSteps measures): TTLs there are whole milliseconds, and
// a key very close to its expiry is given a few milliseconds more so that
// it cannot expire before the script runs.
const TTLTolerance = 10 * time.Millisecond

// DialRedis connects to the Redis at addr, which is host:port or a URL
// redis://[user:password@]host:port[/db]. The database (default 0) must be
// empty.
func DialRedis(ctx context.Context, addr string) (*RedisEnv, error) {
	hostport, db, user, pass, err := parseRedisAddr(addr)
	if err != nil {
		return nil, err
	}
	conn, err := dialRESP(ctx, hostport)
	if err != nil {
		return nil, err
	}
	e := &RedisEnv{addr: hostport, db: db, conn: conn, virtual: StartTime.Time(), realSync: time.Now()}
	fail := func(err error) (*RedisEnv, error) {
		conn.close()
		return nil, err
	}
	if pass != "" {
		auth := []string{"AUTH", pass}
		if user != "" {
			auth = []string{"AUTH", user, pass}
		}
		if err := e.ok(ctx, auth...); err != nil {
			return fail(err)
		}
	}
	if err := e.ok(ctx, "SELECT", strconv.Itoa(db)); err != nil {
		return fail(err)
	}
	n, err := e.conn.do(ctx, "DBSIZE")
	if err != nil {
		return fail(err)
	}
	if n.Kind != KindInt || n.Int != 0 {
		return fail(fmt.Errorf("verify: database %d on %s is not empty (%s keys); step files need an empty database: choose another one with redis://%s/N", db, hostport, n, hostport))
	}
	return e, nil
}

func parseRedisAddr(addr string) (hostport string, db int, user, pass string, err error) {
	if !strings.Contains(addr, "://") {
		if addr == "" {
			return "", 0, "", "", errors.New("verify: empty Redis address")
		}
		return addr, 0, "", "", nil
	}
	u, err := url.Parse(addr)
	if err != nil {
		return "", 0, "", "", fmt.Errorf("verify: Redis address %q: %w", addr, err)
	}
	if u.Scheme != "redis" {
		return "", 0, "", "", fmt.Errorf("verify: Redis address %q: scheme must be redis://", addr)
	}
	if p := strings.Trim(u.Path, "/"); p != "" {
		db, err = strconv.Atoi(p)
		if err != nil || db < 0 {
			return "", 0, "", "", fmt.Errorf("verify: Redis address %q: bad database number %q", addr, p)
		}
	}
	if u.User != nil {
		user = u.User.Username()
		pass, _ = u.User.Password()
		if pass == "" {
			user, pass = "", user
		}
	}
	return u.Host, db, user, pass, nil
}

func (e *RedisEnv) ok(ctx context.Context, args ...string) error {
	r, err := e.conn.do(ctx, args...)
	if err != nil {
		return err
	}
	if r.Kind == KindError {
		return fmt.Errorf("verify: %s on %s: %s", args[0], e.addr, r.Str)
	}
	return nil
}

// Server asks the server what it is (HELLO: its name and version; INFO's
// redis_version cannot tell, Valkey reports 7.2.4 there) and returns the
// Server a Sandbox answers as to match it.
func (e *RedisEnv) Server(ctx context.Context) (Server, error) {
	r, err := e.conn.do(ctx, "HELLO", "2")
	if err != nil {
		return "", err
	}
	if r.Kind != KindArray {
		return "", fmt.Errorf("verify: HELLO on %s: %s", e.addr, r)
	}
	var name, version string
	for i := 0; i+1 < len(r.Elems); i += 2 {
		switch r.Elems[i].Str {
		case "server":
			name = r.Elems[i+1].Str
		case "version":
			version = r.Elems[i+1].Str
		}
	}
	return ServerOf(name, version), nil
}

// Name implements Env.
func (e *RedisEnv) Name() string { return "redis " + e.addr }

// Addr is the server's host:port.
func (e *RedisEnv) Addr() string { return e.addr }

// DB is the database number in use.
func (e *RedisEnv) DB() int { return e.db }

// VirtualClock implements Env: false, a real server's TIME is its own.
func (e *RedisEnv) VirtualClock() bool { return false }

// Eval implements Env.
func (e *RedisEnv) Eval(ctx context.Context, script string, keys, args []string) (Reply, error) {
	return e.conn.do(ctx, evalArgs(script, keys, args)...)
}

// Do implements Env.
func (e *RedisEnv) Do(ctx context.Context, args ...string) (Reply, error) {
	return e.conn.do(ctx, args...)
}

// SetTime implements Env: it shifts every TTL by the virtual time elapsed
// since the last call minus the real time elapsed, deleting keys whose
// time is up.
func (e *RedisEnv) SetTime(ctx context.Context, t time.Time) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	realNow := time.Now()
	// The TTLs move by whole milliseconds; the rest is carried to the
	// next call, so the emulation does not drift over many steps.
	e.carry += t.Sub(e.virtual) - realNow.Sub(e.realSync)
	e.virtual, e.realSync = t, realNow
	// Round down, so keys outlive the virtual clock by under 1ms rather
	// than expire early.
	ms := e.carry.Milliseconds()
	if e.carry < 0 && e.carry%time.Millisecond != 0 {
		ms--
	}
	if ms == 0 {
		return nil
	}
	e.carry -= time.Duration(ms) * time.Millisecond
	keys, err := e.keys(ctx)
	if err != nil {
		return err
	}
	for _, k := range keys {
		if err := e.shiftTTL(ctx, k, ms); err != nil {
			return err
		}
	}
	return nil
}

// shiftTTL brings the expiry of key ms milliseconds closer. It moves the
// absolute expiry time (PEXPIRETIME, PEXPIREAT), which loses nothing to
// rounding; servers before Redis 7 get PTTL and PEXPIRE.
func (e *RedisEnv) shiftTTL(ctx context.Context, key string, ms int64) error {
	r, err := e.conn.do(ctx, "PEXPIRETIME", key)
	if err != nil {
		return err
	}
	if r.Kind == KindInt {
		if r.Int < 0 {
			return nil
		}
		_, err = e.conn.do(ctx, "PEXPIREAT", key, strconv.FormatInt(r.Int-ms, 10))
		return err
	}
	r, err = e.conn.do(ctx, "PTTL", key)
	if err != nil || r.Kind != KindInt || r.Int < 0 {
		return err
	}
	if left := r.Int - ms; left > 0 {
		_, err = e.conn.do(ctx, "PEXPIRE", key, strconv.FormatInt(left, 10))
	} else {
		_, err = e.conn.do(ctx, "DEL", key)
	}
	return err
}

// syncedStep runs one step in a MULTI/EXEC transaction: the commands that
// make every key expire as on the reference (ttls), the step's do
// commands, the script, the reads of the step's ttl and expect lines and,
// with keyspace, of every key; then every key's TTL is lengthened by
// parkTTL, so that none expires before the next step sets them again (see
// minSyncTTL).
func (e *RedisEnv) syncedStep(ctx context.Context, ttls map[string]time.Duration, st *Step, at time.Time, script string, keys, args []string, keyspace bool) (*stepResult, error) {
	present, err := e.keys(ctx)
	if err != nil {
		return nil, err
	}
	cmds := syncCommands(present, ttls)
	first := len(cmds)
	for _, c := range st.Do {
		cmds = append(cmds, expand(c.Args, at))
	}
	call := len(cmds)
	cmds = append(cmds, evalArgs(script, keys, args))
	for _, tc := range st.TTLs {
		cmds = append(cmds, []string{"PTTL", tc.Key})
	}
	for _, ex := range st.Expects {
		cmds = append(cmds, expand(ex.Args, at))
	}
	if keyspace {
		cmds = append(cmds, evalArgs(snapshotScript, nil, nil))
	}
	cmds = append(cmds, evalArgs(parkScript, nil, []string{strconv.FormatInt(parkTTL.Milliseconds(), 10)}))
	began := time.Now()
	replies, err := e.transaction(ctx, cmds)
	if err != nil {
		return nil, fmt.Errorf("verify: step %q on %s: %w", st.Name, e.Name(), err)
	}
	r := &stepResult{exec: time.Since(began), done: true}
	for i, c := range st.Do {
		if rep := replies[first+i]; rep.Kind == KindError {
			return nil, fmt.Errorf("verify: step %q: do %s on %s: %s", st.Name, strings.Join(c.Args, " "), e.Name(), rep.Str)
		}
	}
	next := call
	take := func(n int) []Reply {
		out := replies[next : next+n]
		next += n
		return out
	}
	r.reply = take(1)[0]
	r.ttls = take(len(st.TTLs))
	r.expects = take(len(st.Expects))
	if keyspace {
		if r.state, err = scriptedSnapshot(take(1)[0]); err != nil {
			return nil, fmt.Errorf("verify: step %q on %s: %w", st.Name, e.Name(), err)
		}
	}
	return r, nil
}

// parkTTL is how much longer a real server's keys live between steps.
const parkTTL = time.Hour

// parkScript lengthens the TTL of every key by ARGV[1] ms.
const parkScript = `for _, k in ipairs(redis.call('KEYS', '*')) do
  local t = redis.call('PTTL', k)
  if t > 0 then redis.call('PEXPIRE', k, t + tonumber(ARGV[1])) end
end
return 0`

// snapshotScript replies with every key as {key, type, content, PTTL}, the
// content read as snapshot reads it.
const snapshotScript = `local out = {}
for _, k in ipairs(redis.call('KEYS', '*')) do
  local t = redis.call('TYPE', k).ok
  local v = ''
  if t == 'string' then v = redis.call('GET', k)
  elseif t == 'hash' then v = redis.call('HGETALL', k)
  elseif t == 'list' then v = redis.call('LRANGE', k, 0, -1)
  elseif t == 'set' then v = redis.call('SMEMBERS', k)
  elseif t == 'zset' then v = redis.call('ZRANGE', k, 0, -1, 'WITHSCORES')
  elseif t == 'stream' then v = redis.call('XRANGE', k, '-', '+')
  end
  out[#out + 1] = {k, t, v, redis.call('PTTL', k)}
end
return out`

// scriptedSnapshot turns the reply of snapshotScript into a sorted keyspace.
func scriptedSnapshot(r Reply) ([]keyState, error) {
	if r.Kind != KindArray {
		return nil, fmt.Errorf("reading the keyspace: %s", r)
	}
	out := make([]keyState, 0, len(r.Elems))
	for _, k := range r.Elems {
		if len(k.Elems) != 4 {
			return nil, fmt.Errorf("reading the keyspace: %s", k)
		}
		ks := keyState{Key: k.Elems[0].Str, Type: k.Elems[1].Str, PTTL: k.Elems[3].Int}
		switch ks.Type {
		case "string", "hash", "list", "set", "zset", "stream":
			ks.Value = canonicalValue(ks.Type, k.Elems[2])
			if ks.Type == "string" {
				ks.raw = k.Elems[2].Str
			}
		default:
			ks.Value = "(" + ks.Type + ")"
		}
		out = append(out, ks)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// transaction sends cmds in one MULTI/EXEC and returns their replies.
func (e *RedisEnv) transaction(ctx context.Context, cmds [][]string) ([]Reply, error) {
	if err := e.ok(ctx, "MULTI"); err != nil {
		return nil, err
	}
	var queueErr error
	for _, c := range cmds {
		r, err := e.conn.do(ctx, c...)
		if err != nil {
			return nil, err
		}
		if r.Kind == KindError && queueErr == nil {
			queueErr = fmt.Errorf("%s refused: %s", c[0], r.Str)
		}
	}
	r, err := e.conn.do(ctx, "EXEC")
	if err != nil {
		return nil, err
	}
	if queueErr != nil {
		return nil, queueErr
	}
	if r.Kind != KindArray || len(r.Elems) != len(cmds) {
		return nil, fmt.Errorf("EXEC replied %s", r)
	}
	return r.Elems, nil
}

// setVirtualTime moves the virtual clock without touching TTLs.
func (e *RedisEnv) setVirtualTime(t time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.virtual, e.realSync, e.carry = t, time.Now(), 0
}

func (e *RedisEnv) keys(ctx context.Context) ([]string, error) {
	r, err := e.conn.do(ctx, "KEYS", "*")
	if err != nil {
		return nil, err
	}
	if r.Kind != KindArray {
		return nil, fmt.Errorf("verify: KEYS on %s: %s", e.addr, r)
	}
	out := make([]string, 0, len(r.Elems))
	for _, k := range r.Elems {
		out = append(out, k.Str)
	}
	return out, nil
}

// Reset implements Env: FLUSHDB of the database in use.
func (e *RedisEnv) Reset(ctx context.Context) error {
	e.mu.Lock()
	e.virtual, e.realSync, e.carry = StartTime.Time(), time.Now(), 0
	e.mu.Unlock()
	return e.ok(ctx, "FLUSHDB")
}

// Close implements Env: it empties the database in use and disconnects.
func (e *RedisEnv) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := e.ok(ctx, "FLUSHDB")
	if cerr := e.conn.close(); err == nil {
		err = cerr
	}
	return err
}

// keyState is one key as snapshot saw it.
type keyState struct {
	Key   string
	Type  string // string, hash, list, set, zset, ...
	Value string // canonical text of the content (see snapshot)
	raw   string // a string's value
	PTTL  int64  // ms; -1 without TTL
}

// snapshot reads every key of env with its type, content and TTL, sorted by
// key. Contents are canonical text: a string's value, a hash's fields
// sorted, a set's members sorted, a sorted set's members in order with
// scores as shortest decimal numbers, a list's items and a stream's entries
// in order. It is meant for the small keyspaces of tests.
func snapshot(ctx context.Context, env Env) ([]keyState, error) {
	r, err := env.Do(ctx, "KEYS", "*")
	if err != nil {
		return nil, err
	}
	if r.Kind != KindArray {
		return nil, fmt.Errorf("verify: KEYS on %s: %s", env.Name(), r)
	}
	keys := make([]string, 0, len(r.Elems))
	for _, k := range r.Elems {
		keys = append(keys, k.Str)
	}
	sort.Strings(keys)
	out := make([]keyState, 0, len(keys))
	for _, k := range keys {
		ks, ok, err := readKey(ctx, env, k)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, ks)
		}
	}
	return out, nil
}

func readKey(ctx context.Context, env Env, key string) (keyState, bool, error) {
	ks := keyState{Key: key}
	t, err := env.Do(ctx, "TYPE", key)
	if err != nil {
		return ks, false, err
	}
	ks.Type = t.Str
	var cmd []string
	switch ks.Type {
	case "none":
		return ks, false, nil // expired meanwhile
	case "string":
		cmd = []string{"GET", key}
	case "hash":
		cmd = []string{"HGETALL", key}
	case "list":
		cmd = []string{"LRANGE", key, "0", "-1"}
	case "set":
		cmd = []string{"SMEMBERS", key}
	case "zset":
		cmd = []string{"ZRANGE", key, "0", "-1", "WITHSCORES"}
	case "stream":
		cmd = []string{"XRANGE", key, "-", "+"}
	default:
		ks.Value = "(" + ks.Type + ")"
	}
	if cmd != nil {
		v, err := env.Do(ctx, cmd...)
		if err != nil {
			return ks, false, err
		}
		ks.Value = canonicalValue(ks.Type, v)
		if ks.Type == "string" {
			ks.raw = v.Str
		}
	}
	p, err := env.Do(ctx, "PTTL", key)
	if err != nil {
		return ks, false, err
	}
	if p.Kind == KindInt && p.Int == -2 {
		return ks, false, nil
	}
	ks.PTTL = p.Int
	return ks, true, nil
}

func canonicalValue(typ string, v Reply) string {
	if v.Kind != KindArray {
		return v.String()
	}
	var items []string
	switch typ {
	case "hash":
		for i := 0; i+1 < len(v.Elems); i += 2 {
			items = append(items, strconv.Quote(v.Elems[i].Str)+": "+strconv.Quote(v.Elems[i+1].Str))
		}
		sort.Strings(items)
	case "stream":
		for _, e := range v.Elems {
			if len(e.Elems) == 2 {
				items = append(items, strconv.Quote(e.Elems[0].Str)+": "+canonicalValue("list", e.Elems[1]))
			}
		}
	case "zset":
		for i := 0; i+1 < len(v.Elems); i += 2 {
			score := v.Elems[i+1].Str
			if f, err := strconv.ParseFloat(score, 64); err == nil {
				score = strconv.FormatFloat(f, 'g', -1, 64)
			}
			items = append(items, strconv.Quote(v.Elems[i].Str)+": "+score)
		}
	default:
		for _, e := range v.Elems {
			items = append(items, strconv.Quote(e.Str))
		}
		if typ == "set" {
			sort.Strings(items)
		}
	}
	return "{" + strings.Join(items, ", ") + "}"
}
