package verify

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/alicebob/miniredis/v2/server"
	lua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/ast"
	"github.com/yuin/gopher-lua/parse"
)

// Sandbox runs Lua scripts the way Redis 7 does, in process, on gopher-lua:
// KEYS and ARGV, redis.call and redis.pcall, redis.error_reply,
// redis.status_reply, redis.sha1hex, redis.log, cjson and bit; reading an
// undefined global or writing any global is an error; numbers passed to
// redis.call are formatted as the Sandbox's Server does (Redis 7.0: %.17g);
// replies are converted as Redis
// converts them (Lua numbers truncated to integers, false to nil, true to
// 1, {err=...} and {ok=...} tables to errors and statuses, arrays cut at the
// first nil).
//
// Commands run against an in-process miniredis store, which never listens
// on the network, and every command is recorded (see Run) with the Lua line
// that issued it. TIME and key expiry follow the sandbox clock (SetTime).
//
// Known differences from Redis: gopher-lua prints non-integer numbers with
// up to 17 significant digits where Lua 5.1 uses 14 (tostring is mended,
// concatenation is not), the struct and cmsgpack libraries are missing, and
// a few commands missing from miniredis fail with an unknown-command error.
// Keep arithmetic in integers and these never matter; the differential
// runner (RunSteps) shows where they do.
//
// A Sandbox is safe for concurrent use; scripts run one at a time.
type Sandbox struct {
	// Timeout bounds one script run when the context has no deadline
	// (default 30s): a script that loops forever fails instead of hanging.
	// It is wall-clock time, generous so that a slow machine (a loaded CI
	// runner, the race detector) does not stop a script that would end.
	Timeout time.Duration
	// Server is the server whose differences the sandbox follows (number
	// formatting, error texts); default Redis70. Set it before the first
	// run.
	Server Server

	mu     sync.Mutex
	m      *miniredis.Miniredis
	now    time.Time
	protos map[string]*compiled
	last   *Run
}

// defaultTimeout bounds a script run when neither the context nor the
// Sandbox sets a limit.
const defaultTimeout = 30 * time.Second

// StartTime is where the clock of every environment starts,
// 2024-01-01T00:00:00Z; StartTime.Time() is that instant as a time.Time.
const StartTime Instant = 1704067200000000

// Instant is a point in time as microseconds since the Unix epoch, the
// unit of time of sluice's scripts. It can be a constant, unlike a
// time.Time.
type Instant int64

// Time returns i as a time.Time in UTC.
func (i Instant) Time() time.Time { return time.UnixMicro(int64(i)).UTC() }

// Add returns the time d after i.
func (i Instant) Add(d time.Duration) time.Time { return i.Time().Add(d) }

// UnixMicro returns i in microseconds since the Unix epoch.
func (i Instant) UnixMicro() int64 { return int64(i) }

// UnixMilli returns i in milliseconds since the Unix epoch, rounded down.
func (i Instant) UnixMilli() int64 { return i.Time().UnixMilli() }

// Unix returns i in seconds since the Unix epoch, rounded down.
func (i Instant) Unix() int64 { return i.Time().Unix() }

// String formats i as time.RFC3339Nano does.
func (i Instant) String() string { return i.Time().Format(time.RFC3339Nano) }

// NewSandbox returns a sandbox with an empty store and its clock at
// StartTime.
func NewSandbox() (*Sandbox, error) {
	m := miniredis.NewMiniRedis()
	// Dial starts miniredis without a listener: the store is reached only
	// through Server().Dispatch below.
	conn, err := m.Dial()
	if err != nil {
		return nil, fmt.Errorf("verify: start sandbox store: %w", err)
	}
	conn.Close()
	s := &Sandbox{m: m, protos: map[string]*compiled{}}
	s.setTimeLocked(StartTime.Time())
	m.ClockTTL(true)
	return s, nil
}

// Name implements Env.
func (s *Sandbox) Name() string { return "sandbox" }

// VirtualClock implements Env: TIME and TTLs follow SetTime exactly.
func (s *Sandbox) VirtualClock() bool { return true }

// SetTime implements Env: it moves TIME and key expiry to t.
func (s *Sandbox) SetTime(_ context.Context, t time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setTimeLocked(t)
	return nil
}

func (s *Sandbox) setTimeLocked(t time.Time) {
	s.now = t
	s.m.SetTime(t)
}

// Now returns the sandbox clock.
func (s *Sandbox) Now() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.now
}

// Reset implements Env: it empties the store and moves the clock back to
// StartTime.
func (s *Sandbox) Reset(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m.FlushAll()
	s.m.ClockTTL(false)
	s.setTimeLocked(StartTime.Time())
	s.m.ClockTTL(true)
	return nil
}

// Close implements Env.
func (s *Sandbox) Close() error {
	s.m.Close()
	return nil
}

// expiries returns every key with its remaining TTL (0: none), exactly.
func (s *Sandbox) expiries() map[string]time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]time.Duration{}
	for _, k := range s.m.Keys() {
		out[k] = s.m.TTL(k)
	}
	return out
}

// Miniredis returns the store behind the sandbox, for inspection.
func (s *Sandbox) Miniredis() *miniredis.Miniredis { return s.m }

// Do implements Env: it runs one command against the store, outside any
// script.
func (s *Sandbox) Do(_ context.Context, args ...string) (Reply, error) {
	if len(args) == 0 {
		return Reply{}, errors.New("verify: empty command")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dispatch(args)
}

// dispatch runs one command on the store, outside any script.
func (s *Sandbox) dispatch(args []string) (Reply, error) {
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	srv := s.m.Server()
	if srv == nil {
		return Reply{}, errors.New("verify: sandbox is closed")
	}
	out, err := dispatchTo(srv, server.NewPeer(w), w, &buf, args)
	if err != nil {
		return Reply{}, fmt.Errorf("verify: sandbox store: %s: %w", args[0], err)
	}
	return out, nil
}

// dispatchTo sends args to srv as peer, whose output goes to w and buf.
func dispatchTo(srv *server.Server, peer *server.Peer, w *bufio.Writer, buf *bytes.Buffer, args []string) (r Reply, err error) {
	defer func() {
		if p := recover(); p != nil {
			r, err = Err(fmt.Sprintf("ERR the sandbox store failed on %s: %v", args[0], p)), nil
		}
	}()
	srv.Dispatch(peer, args)
	if err := w.Flush(); err != nil {
		return Reply{}, err
	}
	if buf.Len() == 0 {
		return Reply{}, errors.New("no reply")
	}
	return readReply(bufio.NewReader(buf), 0)
}

// Eval implements Env: it runs script with keys and args and returns its
// reply. Script errors are error replies; the error result is for a script
// that cannot finish (it timed out or the context ended).
func (s *Sandbox) Eval(ctx context.Context, script string, keys, args []string) (Reply, error) {
	run, err := s.Run(ctx, script, keys, args)
	if err != nil {
		return Reply{}, err
	}
	return run.Reply, nil
}

// LastRun returns the record of the most recent script run, or nil.
func (s *Sandbox) LastRun() *Run {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

// Run is the record of one script run in the sandbox.
type Run struct {
	SHA1  string
	Keys  []string
	Args  []string
	Reply Reply
	// Calls lists every redis.call and redis.pcall in order, including the
	// ones that failed.
	Calls []Call
	// ReturnLine is the line of the return statement that ended the
	// script; 0 when it ran off its end or raised an error.
	ReturnLine int
	// ErrorLine is the line where the script raised the error that became
	// its reply; 0 when it did not raise one.
	ErrorLine int
	// Floats lists the numbers in the reply that were not integers, which
	// Redis silently truncates.
	Floats []FloatReply
	// Globals lists the attempts to write a global variable (each one is
	// an error) and reads of undefined globals.
	Globals []GlobalAccess
	// Logs holds the redis.log messages.
	Logs []LogEntry
}

// Call is one command a script sent with redis.call or redis.pcall.
type Call struct {
	Line      int      // Lua line of the call (innermost Lua function)
	Args      []string // the command and its arguments, as sent
	Protected bool     // sent with redis.pcall
	Reply     Reply    // the store's reply
}

// Name returns the command name in upper case.
func (c Call) Name() string {
	if len(c.Args) == 0 {
		return ""
	}
	return strings.ToUpper(c.Args[0])
}

// FloatReply is a non-integer number in a script's reply.
type FloatReply struct {
	Path  []int   // indexes (0-based) from the reply to the number; empty for the reply itself
	Value float64 // the Lua number
	Sent  int64   // the integer Redis replies with instead
	Line  int     // line of the return statement
}

// GlobalAccess is a write to a global variable, or a read of an undefined
// one.
type GlobalAccess struct {
	Name  string
	Line  int
	Write bool
}

// LogEntry is one redis.log call.
type LogEntry struct {
	Level int
	Msg   string
	Line  int
}

// compiled is a script compiled once per sandbox.
type compiled struct {
	proto *lua.FunctionProto
	sha   string
	err   string // the error reply when the script does not compile
}

const replyHook = "__verify_reply__"

func (s *Sandbox) compile(script string) *compiled {
	if c, ok := s.protos[script]; ok {
		return c
	}
	sum := sha1.Sum([]byte(script))
	c := &compiled{sha: hex.EncodeToString(sum[:])}
	chunk, err := parse.Parse(strings.NewReader(script), "user_script")
	if err == nil {
		instrumentReturns(chunk)
		c.proto, err = compileChunk(chunk)
	}
	if err != nil {
		c.err = "ERR Error compiling script (new function): " + compileMessage(err)
	}
	if len(s.protos) > 256 {
		clear(s.protos)
	}
	s.protos[script] = c
	return c
}

func compileChunk(chunk []ast.Stmt) (proto *lua.FunctionProto, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%v", p)
		}
	}()
	return lua.Compile(chunk, "user_script")
}

// compileMessage turns a gopher-lua parse or compile error into Redis'
// "user_script:LINE: message" form.
func compileMessage(err error) string {
	var pe *parse.Error
	if errors.As(err, &pe) {
		msg := strings.Join(strings.Fields(pe.Message), " ")
		if pe.Token != "" {
			msg += " near '" + pe.Token + "'"
		}
		return fmt.Sprintf("user_script:%d: %s", max(pe.Pos.Line, 1), msg)
	}
	var ce *lua.CompileError
	if errors.As(err, &ce) {
		return fmt.Sprintf("user_script:%d: %s", ce.Line, ce.Message)
	}
	return "user_script: " + strings.Join(strings.Fields(err.Error()), " ")
}

// instrumentReturns rewrites every "return e..." of the main chunk (not of
// nested functions) into "return __verify_reply__(LINE, e...)", so a run
// knows which return statement produced its reply. Line numbers are kept.
func instrumentReturns(stmts []ast.Stmt) {
	for _, st := range stmts {
		switch st := st.(type) {
		case *ast.ReturnStmt:
			line := st.Line()
			fn := &ast.IdentExpr{Value: replyHook}
			fn.SetLine(line)
			num := &ast.NumberExpr{Value: strconv.Itoa(line)}
			num.SetLine(line)
			call := &ast.FuncCallExpr{Func: fn, Args: append([]ast.Expr{num}, st.Exprs...)}
			call.SetLine(line)
			call.SetLastLine(st.LastLine())
			st.Exprs = []ast.Expr{call}
		case *ast.DoBlockStmt:
			instrumentReturns(st.Stmts)
		case *ast.WhileStmt:
			instrumentReturns(st.Stmts)
		case *ast.RepeatStmt:
			instrumentReturns(st.Stmts)
		case *ast.IfStmt:
			instrumentReturns(st.Then)
			instrumentReturns(st.Else)
		case *ast.NumberForStmt:
			instrumentReturns(st.Stmts)
		case *ast.GenericForStmt:
			instrumentReturns(st.Stmts)
		}
	}
}

// Run runs script like Eval and returns the full record of the run.
func (s *Sandbox) Run(ctx context.Context, script string, keys, args []string) (*Run, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.compile(script)
	run := &Run{SHA1: c.sha, Keys: append([]string(nil), keys...), Args: append([]string(nil), args...)}
	s.last = run
	if c.proto == nil {
		run.Reply = Err(c.err)
		return run, nil
	}
	if _, ok := ctx.Deadline(); !ok {
		timeout := s.Timeout
		if timeout <= 0 {
			timeout = defaultTimeout
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	rs := &runState{sb: s, run: run}
	var buf bytes.Buffer
	rs.w = bufio.NewWriter(&buf)
	rs.buf = &buf
	rs.peer = server.NewPeer(rs.w)
	if err := rs.exec(ctx, c, keys, args); err != nil {
		return nil, err
	}
	return run, nil
}

// runState is one script run.
type runState struct {
	sb   *Sandbox
	run  *Run
	peer *server.Peer
	w    *bufio.Writer
	buf  *bytes.Buffer
	L    *lua.LState
	env  *lua.LTable // the empty proxy the script sees as _G
	null *lua.LUserData
}

func (rs *runState) exec(ctx context.Context, c *compiled, keys, args []string) (err error) {
	L := lua.NewState(lua.Options{SkipOpenLibs: true, CallStackSize: 256, RegistrySize: 1024 * 20})
	defer L.Close()
	rs.L = L
	defer func() {
		if p := recover(); p != nil {
			rs.run.Reply = Err(fmt.Sprintf("ERR the sandbox failed: %v", p))
			err = nil
		}
	}()
	rs.openLibs()
	rs.setArgs(keys, args)
	fn := L.NewFunctionFromProto(c.proto)
	fn.Env = rs.env
	L.SetContext(ctx)
	L.Push(fn)
	callErr := L.PCall(0, 1, nil)
	L.RemoveContext()
	if callErr != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return fmt.Errorf("verify: script %s did not finish: %w", c.sha, ctxErr)
		}
		rs.run.Reply = rs.errorReply(callErr, c.sha)
		return nil
	}
	rs.run.Reply = rs.toReply(L.Get(-1), nil, 0)
	return nil
}

// errorReply converts an error raised by the script into the error reply
// Redis 7 sends: an {err=...} table keeps its text, anything else becomes
// "ERR " plus the message; both get the "script: SHA, on @user_script:N."
// suffix.
func (rs *runState) errorReply(err error, sha string) Reply {
	var msg string
	line := rs.run.ErrorLine
	var apiErr *lua.ApiError
	if errors.As(err, &apiErr) {
		switch v := apiErr.Object.(type) {
		case *lua.LTable:
			if e, ok := v.RawGetString("err").(lua.LString); ok {
				msg = string(e)
			} else {
				msg = "ERR " + lua.LVAsString(v)
			}
		case lua.LString:
			msg = "ERR " + string(v)
			if n := luaErrorLine(string(v)); n > 0 {
				line = n
			}
		case nil:
			msg = "ERR " + err.Error()
		default:
			msg = "ERR " + v.String()
		}
	} else {
		msg = "ERR " + err.Error()
	}
	if line <= 0 {
		line = 1
	}
	rs.run.ErrorLine = line
	return Err(oneLineError(msg) + fmt.Sprintf(" script: %s, on @user_script:%d.", sha, line))
}

// luaErrorLine returns N from a "user_script:N: message" error, or 0.
func luaErrorLine(msg string) int {
	rest, ok := strings.CutPrefix(msg, "user_script:")
	if !ok {
		return 0
	}
	i := strings.IndexByte(rest, ':')
	if i <= 0 {
		return 0
	}
	n, err := strconv.Atoi(rest[:i])
	if err != nil {
		return 0
	}
	return n
}

func oneLineError(s string) string {
	return strings.NewReplacer("\r\n", " ", "\r", " ", "\n", " ").Replace(s)
}

// line returns the current line of the innermost Lua function on the
// stack, or 0.
func (rs *runState) line() int {
	for level := 0; level < 64; level++ {
		dbg, ok := rs.L.GetStack(level)
		if !ok {
			return 0
		}
		if _, err := rs.L.GetInfo("Sl", dbg, lua.LNil); err != nil {
			continue
		}
		if dbg.What != "G" && dbg.CurrentLine > 0 {
			return dbg.CurrentLine
		}
	}
	return 0
}

// removedGlobals are base functions Redis 7 does not offer to scripts.
var removedGlobals = []string{"print", "dofile", "loadfile", "setfenv", "getfenv", "require", "module", "newproxy", "_printregs"}

func (rs *runState) openLibs() {
	L := rs.L
	for _, lib := range []struct {
		name string
		fn   lua.LGFunction
	}{{lua.BaseLibName, lua.OpenBase}, {lua.TabLibName, lua.OpenTable}, {lua.StringLibName, lua.OpenString}, {lua.MathLibName, lua.OpenMath}, {lua.CoroutineLibName, lua.OpenCoroutine}} {
		L.Push(L.NewFunction(lib.fn))
		L.Push(lua.LString(lib.name))
		L.Call(1, 0)
	}
	g := L.G.Global
	for _, name := range removedGlobals {
		g.RawSetString(name, lua.LNil)
	}
	g.RawSetString("gcinfo", L.NewFunction(func(L *lua.LState) int { L.Push(lua.LNumber(0)); return 1 }))
	rs.env = L.NewTable()
	g.RawSetString("_G", rs.env)
	g.RawSetString("pcall", L.NewFunction(rs.pcall))
	g.RawSetString("tostring", L.NewFunction(luaToString))
	g.RawSetString("error", L.NewFunction(func(L *lua.LState) int {
		obj := L.CheckAny(1)
		rs.run.ErrorLine = rs.line()
		L.Error(obj, L.OptInt(2, 1))
		return 0
	}))
	rawset := g.RawGetString("rawset")
	g.RawSetString("rawset", L.NewFunction(func(L *lua.LState) int {
		if L.Get(1) == rs.env {
			rs.recordGlobal(L.Get(2), true)
			L.RaiseError("Attempt to modify a readonly table")
		}
		L.Push(rawset)
		L.Push(L.Get(1))
		L.Push(L.Get(2))
		L.Push(L.Get(3))
		L.Call(3, 1)
		return 1
	}))
	setmeta := g.RawGetString("setmetatable")
	g.RawSetString("setmetatable", L.NewFunction(func(L *lua.LState) int {
		if L.Get(1) == rs.env {
			L.RaiseError("Attempt to modify a readonly table")
		}
		L.Push(setmeta)
		L.Push(L.Get(1))
		L.Push(L.Get(2))
		L.Call(2, 1)
		return 1
	}))
	g.RawSetString("redis", rs.redisLib())
	rs.null = L.NewUserData()
	g.RawSetString("cjson", rs.cjsonLib())
	g.RawSetString("bit", bitLib(L))

	meta := L.NewTable()
	meta.RawSetString("__index", L.NewFunction(func(L *lua.LState) int {
		key := L.Get(2)
		if k, ok := key.(lua.LString); ok && string(k) == replyHook {
			L.Push(L.NewFunction(rs.replyHook))
			return 1
		}
		v := g.RawGet(key)
		if v == lua.LNil {
			rs.recordGlobal(key, false)
			L.RaiseError("Script attempted to access nonexistent global variable '%s'", lua.LVAsString(key))
		}
		L.Push(v)
		return 1
	}))
	meta.RawSetString("__newindex", L.NewFunction(func(L *lua.LState) int {
		rs.recordGlobal(L.Get(2), true)
		L.RaiseError("Attempt to modify a readonly table")
		return 0
	}))
	meta.RawSetString("__metatable", lua.LFalse)
	L.SetMetatable(rs.env, meta)
}

func (rs *runState) recordGlobal(name lua.LValue, write bool) {
	rs.run.Globals = append(rs.run.Globals, GlobalAccess{Name: lua.LVAsString(name), Line: rs.line(), Write: write})
}

func (rs *runState) setArgs(keys, args []string) {
	g := rs.L.G.Global
	for _, v := range []struct {
		name string
		list []string
	}{{"KEYS", keys}, {"ARGV", args}} {
		t := rs.L.CreateTable(len(v.list), 0)
		for _, s := range v.list {
			t.Append(lua.LString(s))
		}
		g.RawSetString(v.name, t)
	}
}

// replyHook receives (line, values...) from an instrumented return
// statement and returns the values.
func (rs *runState) replyHook(L *lua.LState) int {
	rs.run.ReturnLine = int(L.CheckNumber(1))
	return L.GetTop() - 1
}

// pcall is Lua's pcall, except that an {err=...} table raised by
// redis.call reaches the handler as its err string, as in Redis 7.
func (rs *runState) pcall(L *lua.LState) int {
	L.CheckAny(1)
	nargs := L.GetTop() - 1
	if err := L.PCall(nargs, lua.MultRet, nil); err != nil {
		L.Push(lua.LFalse)
		var apiErr *lua.ApiError
		if errors.As(err, &apiErr) {
			obj := apiErr.Object
			if t, ok := obj.(*lua.LTable); ok {
				if e, ok := t.RawGetString("err").(lua.LString); ok {
					obj = e
				}
			}
			L.Push(obj)
		} else {
			L.Push(lua.LString(err.Error()))
		}
		return 2
	}
	L.Insert(lua.LTrue, 1)
	return L.GetTop()
}

// luaToString is tostring with Lua 5.1's number format (%.14g).
func luaToString(L *lua.LState) int {
	v := L.CheckAny(1)
	if n, ok := v.(lua.LNumber); ok {
		L.Push(lua.LString(formatG(float64(n), 14)))
		return 1
	}
	L.Push(L.ToStringMeta(v))
	return 1
}

// formatG formats f as C's printf("%.<prec>g") does.
func formatG(f float64, prec int) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	case math.IsNaN(f):
		if math.Signbit(f) {
			return "-nan"
		}
		return "nan"
	}
	return strconv.FormatFloat(f, 'g', prec, 64)
}

// toInteger converts a Lua number the way Redis does when a script returns
// it: truncated toward zero, with NaN and out-of-range values becoming the
// smallest int64.
func toInteger(f float64) int64 {
	if math.IsNaN(f) || f >= 9.223372036854775807e18 || f < -9.223372036854775808e18 {
		return math.MinInt64
	}
	return int64(f)
}

func (rs *runState) redisLib() *lua.LTable {
	L := rs.L
	t := L.NewTable()
	fns := map[string]lua.LGFunction{
		"call":  func(L *lua.LState) int { return rs.call(L, false) },
		"pcall": func(L *lua.LState) int { return rs.call(L, true) },
		"error_reply": func(L *lua.LState) int {
			s, ok := L.Get(1).(lua.LString)
			if L.GetTop() != 1 || !ok {
				rs.raise("ERR wrong number or type of arguments")
			}
			L.Push(errTable(L, errorReplyText(string(s))))
			return 1
		},
		"status_reply": func(L *lua.LState) int {
			s, ok := L.Get(1).(lua.LString)
			if L.GetTop() != 1 || !ok {
				rs.raise("ERR wrong number or type of arguments")
			}
			st := L.NewTable()
			st.RawSetString("ok", s)
			L.Push(st)
			return 1
		},
		"sha1hex": func(L *lua.LState) int {
			if L.GetTop() != 1 {
				rs.raise("ERR wrong number of arguments")
			}
			sum := sha1.Sum([]byte(lua.LVAsString(L.Get(1))))
			L.Push(lua.LString(hex.EncodeToString(sum[:])))
			return 1
		},
		"log": func(L *lua.LState) int {
			if L.GetTop() < 2 {
				rs.raise(rs.sb.Server.text(textLogArgs))
			}
			level, ok := L.Get(1).(lua.LNumber)
			if !ok {
				rs.raise("ERR First argument must be a number (log level).")
			}
			if level < 0 || level > 3 {
				rs.raise(rs.sb.Server.text(textLogLevel))
			}
			parts := make([]string, 0, L.GetTop()-1)
			for i := 2; i <= L.GetTop(); i++ {
				parts = append(parts, lua.LVAsString(L.Get(i)))
			}
			rs.run.Logs = append(rs.run.Logs, LogEntry{Level: int(level), Msg: strings.Join(parts, " "), Line: rs.line()})
			return 0
		},
		"setresp": func(L *lua.LState) int {
			n := L.CheckInt(1)
			if n != 2 {
				rs.raise(fmt.Sprintf("ERR the sandbox speaks RESP2 only; redis.setresp(%d) is not supported", n))
			}
			return 0
		},
		"set_repl":           func(L *lua.LState) int { return 0 },
		"replicate_commands": func(L *lua.LState) int { L.Push(lua.LTrue); return 1 },
		"breakpoint":         func(L *lua.LState) int { L.Push(lua.LFalse); return 1 },
		"debug":              func(L *lua.LState) int { return 0 },
		"acl_check_cmd":      func(L *lua.LState) int { L.CheckString(1); L.Push(lua.LTrue); return 1 },
	}
	for name, fn := range fns {
		t.RawSetString(name, L.NewFunction(fn))
	}
	consts := map[string]int{
		"LOG_DEBUG": 0, "LOG_VERBOSE": 1, "LOG_NOTICE": 2, "LOG_WARNING": 3,
		"REPL_NONE": 0, "REPL_AOF": 1, "REPL_SLAVE": 2, "REPL_REPLICA": 2, "REPL_ALL": 3,
		"REDIS_VERSION_NUM": 0x07000f,
	}
	for name, v := range consts {
		t.RawSetString(name, lua.LNumber(v))
	}
	t.RawSetString("REDIS_VERSION", lua.LString("7.0.15"))
	return t
}

// errorReplyText builds the err text of redis.error_reply(s): "-CODE msg"
// keeps CODE, a message without a leading '-' gets an ERR code... as in
// Redis 7, where the argument is first prefixed with '-' when it lacks one.
func errorReplyText(s string) string {
	if !strings.HasPrefix(s, "-") {
		s = "-" + s
	}
	code, msg, found := strings.Cut(s[1:], " ")
	if !found {
		code, msg = "ERR", s[1:]
	}
	return code + " " + strings.TrimRight(msg, "\r\n")
}

func errTable(L *lua.LState, msg string) *lua.LTable {
	t := L.NewTable()
	t.RawSetString("err", lua.LString(msg))
	return t
}

// raise raises an {err=msg} table, as Redis does for errors of the redis
// library.
func (rs *runState) raise(msg string) {
	rs.run.ErrorLine = rs.line()
	rs.L.Error(errTable(rs.L, msg), 1)
}

// scriptDenied are commands Redis 7 refuses inside scripts ("This Redis
// command is not allowed from script"); blocking commands are among them.
var scriptDenied = setOf(
	"EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO", "FCALL", "FCALL_RO", "SCRIPT", "FUNCTION",
	"MULTI", "EXEC", "DISCARD", "WATCH", "UNWATCH",
	"SUBSCRIBE", "PSUBSCRIBE", "SSUBSCRIBE", "UNSUBSCRIBE", "PUNSUBSCRIBE", "SUNSUBSCRIBE",
	"BLPOP", "BRPOP", "BRPOPLPUSH", "BLMOVE", "BLMPOP", "BZPOPMIN", "BZPOPMAX", "BZMPOP",
	"CLIENT", "CONFIG", "DEBUG", "SHUTDOWN", "AUTH", "HELLO", "MONITOR", "SAVE", "BGSAVE",
	"BGREWRITEAOF", "WAIT", "WAITAOF", "SYNC", "PSYNC", "REPLICAOF", "SLAVEOF", "RESET", "QUIT",
	"MIGRATE", "FAILOVER",
)

// call implements redis.call (protected=false) and redis.pcall.
func (rs *runState) call(L *lua.LState, protected bool) int {
	fail := func(msg string) int {
		if protected {
			L.Push(errTable(L, msg))
			return 1
		}
		rs.raise(msg)
		return 0
	}
	n := L.GetTop()
	if n == 0 {
		return fail(rs.sb.Server.text(textNoArgs))
	}
	args := make([]string, n)
	for i := 1; i <= n; i++ {
		switch v := L.Get(i).(type) {
		case lua.LString:
			args[i-1] = string(v)
		case lua.LNumber:
			args[i-1] = rs.sb.Server.formatNumber(float64(v))
		default:
			return fail(rs.sb.Server.text(textBadArg))
		}
	}
	c := Call{Line: rs.line(), Args: args, Protected: protected}
	name := strings.ToUpper(args[0])
	var reply Reply
	if scriptDenied[name] {
		reply = Err("ERR This Redis command is not allowed from script")
	} else {
		rs.buf.Reset()
		r, err := dispatchTo(rs.sb.m.Server(), rs.peer, rs.w, rs.buf, args)
		if err != nil {
			r = Err(fmt.Sprintf("ERR the sandbox store failed on %s: %v", args[0], err))
		}
		if r.Kind == KindError && strings.HasPrefix(r.Str, "ERR unknown command") {
			r = Err(rs.sb.Server.text(textUnknownCommand))
		}
		reply = r
	}
	c.Reply = reply
	rs.run.Calls = append(rs.run.Calls, c)
	if reply.Kind == KindError {
		return fail(reply.Str)
	}
	L.Push(rs.toLua(reply))
	return 1
}

// toLua converts a reply to Lua as Redis 7 does with RESP2: integer →
// number, bulk → string, nil → false, array → table, status → {ok=...},
// error → {err=...}.
func (rs *runState) toLua(r Reply) lua.LValue {
	L := rs.L
	switch r.Kind {
	case KindInt:
		return lua.LNumber(r.Int)
	case KindBulk:
		return lua.LString(r.Str)
	case KindStatus:
		t := L.NewTable()
		t.RawSetString("ok", lua.LString(r.Str))
		return t
	case KindError:
		return errTable(L, r.Str)
	case KindArray:
		t := L.CreateTable(len(r.Elems), 0)
		for i, e := range r.Elems {
			t.RawSetInt(i+1, rs.toLua(e))
		}
		return t
	}
	return lua.LFalse
}

// toReply converts a Lua value to a reply as Redis 7 does with RESP2.
func (rs *runState) toReply(v lua.LValue, path []int, depth int) Reply {
	if depth > 200 {
		return Err("ERR reached lua stack limit")
	}
	switch v := v.(type) {
	case lua.LNumber:
		f := float64(v)
		n := toInteger(f)
		if float64(n) != f || math.IsNaN(f) || math.IsInf(f, 0) {
			rs.run.Floats = append(rs.run.Floats, FloatReply{Path: append([]int(nil), path...), Value: f, Sent: n, Line: rs.run.ReturnLine})
		}
		return Int(n)
	case lua.LString:
		return Bulk(string(v))
	case lua.LBool:
		if v {
			return Int(1)
		}
		return Nil()
	case *lua.LTable:
		if e, ok := v.RawGetString("err").(lua.LString); ok {
			return Err(oneLineError(string(e)))
		}
		if s, ok := v.RawGetString("ok").(lua.LString); ok {
			return Status(oneLineError(string(s)))
		}
		elems := []Reply{}
		for i := 1; ; i++ {
			e := v.RawGetInt(i)
			if e == lua.LNil {
				break
			}
			elems = append(elems, rs.toReply(e, append(path, i-1), depth+1))
		}
		return Array(elems...)
	}
	return Nil()
}

func setOf(names ...string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}
