package verify

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/yuin/gopher-lua/ast"

	"github.com/sluice-go/sluice/gen"
)

// knownGlobals are the globals Redis 7 gives scripts.
var knownGlobals = setOf(
	"KEYS", "ARGV", "redis", "cjson", "bit", "struct", "cmsgpack", "string", "table", "math",
	"coroutine", "_G", "_VERSION", "assert", "collectgarbage", "error", "gcinfo", "getmetatable",
	"ipairs", "load", "loadstring", "next", "pairs", "pcall", "rawequal", "rawget", "rawset",
	"select", "setmetatable", "tonumber", "tostring", "type", "unpack", "xpcall",
)

func newLinter(f *vetFile) *linter {
	return &linter{f: f, keys: inputUse{lines: map[int]int{}}, args: inputUse{lines: map[int]int{}}, written: map[string]bool{}}
}

// scope is one block's local names.
type scope struct {
	parent *scope
	names  map[string]bool
}

func (s *scope) declared(name string) bool {
	for ; s != nil; s = s.parent {
		if s.names[name] {
			return true
		}
	}
	return false
}

// inputUse records which KEYS or ARGV indexes a script reads.
type inputUse struct {
	lines   map[int]int // index → first line that reads it
	dynamic bool        // read with a computed index, or as a whole
}

// linter walks a script's syntax tree for the static checks.
type linter struct {
	f       *vetFile
	sc      *scope
	fnDepth int // > 0 inside a function body
	keys    inputUse
	args    inputUse
	returns []*ast.ReturnStmt // return statements of the main chunk
	written map[string]bool   // globals already reported as written
}

func lintStatic(f *vetFile, chunk []ast.Stmt) {
	l := newLinter(f)
	l.block(chunk)
	l.inputs()
	l.replyShape()
}

func (l *linter) push() { l.sc = &scope{parent: l.sc, names: map[string]bool{}} }
func (l *linter) pop()  { l.sc = l.sc.parent }

func (l *linter) declare(names ...string) {
	for _, n := range names {
		l.sc.names[n] = true
	}
}

func (l *linter) block(stmts []ast.Stmt) {
	l.push()
	l.stmts(stmts)
	l.pop()
}

func (l *linter) stmts(stmts []ast.Stmt) {
	for _, st := range stmts {
		l.stmt(st)
	}
}

func (l *linter) stmt(st ast.Stmt) {
	switch st := st.(type) {
	case *ast.LocalAssignStmt:
		// "local function f" parses as "local f = function": f is visible
		// inside its own body.
		if len(st.Names) == 1 && len(st.Exprs) == 1 {
			if _, ok := st.Exprs[0].(*ast.FunctionExpr); ok {
				l.declare(st.Names...)
			}
		}
		l.exprs(st.Exprs)
		l.declare(st.Names...)
	case *ast.AssignStmt:
		l.exprs(st.Rhs)
		for _, lhs := range st.Lhs {
			if id, ok := lhs.(*ast.IdentExpr); ok {
				if !l.sc.declared(id.Value) {
					l.globalWrite(id.Value, line(id, st))
				}
				continue
			}
			l.expr(lhs)
		}
	case *ast.FuncDefStmt:
		if id, ok := st.Name.Func.(*ast.IdentExpr); ok && st.Name.Receiver == nil {
			if !l.sc.declared(id.Value) {
				l.globalWrite(id.Value, st.Line())
			}
		} else {
			l.expr(st.Name.Func)
			l.expr(st.Name.Receiver)
		}
		l.function(st.Func, st.Name.Method != "")
	case *ast.FuncCallStmt:
		l.expr(st.Expr)
	case *ast.DoBlockStmt:
		l.block(st.Stmts)
	case *ast.WhileStmt:
		l.expr(st.Condition)
		l.block(st.Stmts)
	case *ast.RepeatStmt:
		l.push()
		l.stmts(st.Stmts)
		l.expr(st.Condition)
		l.pop()
	case *ast.IfStmt:
		l.expr(st.Condition)
		l.block(st.Then)
		l.block(st.Else)
	case *ast.NumberForStmt:
		l.expr(st.Init)
		l.expr(st.Limit)
		l.expr(st.Step)
		l.push()
		l.declare(st.Name)
		l.stmts(st.Stmts)
		l.pop()
	case *ast.GenericForStmt:
		l.exprs(st.Exprs)
		l.push()
		l.declare(st.Names...)
		l.stmts(st.Stmts)
		l.pop()
	case *ast.ReturnStmt:
		if l.fnDepth == 0 {
			l.returns = append(l.returns, st)
		}
		l.exprs(st.Exprs)
	}
}

// line returns n's line, or fallback's when n has none.
func line(n, fallback ast.PositionHolder) int {
	if n != nil && n.Line() > 0 {
		return n.Line()
	}
	if fallback != nil {
		return fallback.Line()
	}
	return 0
}

func (l *linter) function(fn *ast.FunctionExpr, method bool) {
	if fn == nil {
		return
	}
	l.fnDepth++
	l.push()
	if method {
		l.declare("self")
	}
	if fn.ParList != nil {
		l.declare(fn.ParList.Names...)
		if fn.ParList.HasVargs {
			l.declare("arg")
		}
	}
	l.stmts(fn.Stmts)
	l.pop()
	l.fnDepth--
}

func (l *linter) exprs(es []ast.Expr) {
	for _, e := range es {
		l.expr(e)
	}
}

func (l *linter) expr(e ast.Expr) {
	switch e := e.(type) {
	case nil:
	case *ast.IdentExpr:
		l.ident(e)
	case *ast.AttrGetExpr:
		if l.constIndex(e) {
			return
		}
		l.expr(e.Object)
		l.expr(e.Key)
	case *ast.TableExpr:
		for _, f := range e.Fields {
			l.expr(f.Key)
			l.expr(f.Value)
		}
	case *ast.FuncCallExpr:
		l.redisCall(e)
		l.expr(e.Func)
		l.expr(e.Receiver)
		l.exprs(e.Args)
	case *ast.LogicalOpExpr:
		l.expr(e.Lhs)
		l.expr(e.Rhs)
	case *ast.RelationalOpExpr:
		l.expr(e.Lhs)
		l.expr(e.Rhs)
	case *ast.StringConcatOpExpr:
		l.expr(e.Lhs)
		l.expr(e.Rhs)
	case *ast.ArithmeticOpExpr:
		l.expr(e.Lhs)
		l.expr(e.Rhs)
	case *ast.UnaryMinusOpExpr:
		l.expr(e.Expr)
	case *ast.UnaryNotOpExpr:
		l.expr(e.Expr)
	case *ast.UnaryLenOpExpr:
		l.expr(e.Expr)
	case *ast.FunctionExpr:
		l.function(e, false)
	}
}

// ident checks a name read: a global that is not defined, or KEYS or ARGV
// read whole (their use is then dynamic).
func (l *linter) ident(e *ast.IdentExpr) {
	if l.sc.declared(e.Value) {
		return
	}
	switch e.Value {
	case "KEYS":
		l.keys.dynamic = true
	case "ARGV":
		l.args.dynamic = true
	}
	if !knownGlobals[e.Value] && !l.written[e.Value] {
		l.f.add(CheckUndefinedGlobal, e.Line(), l.f.wordCol(e.Line(), e.Value),
			"%s is not defined: a global that does not exist is an error in Redis (declare it local)", e.Value)
	}
}

// constIndex records KEYS[i] or ARGV[i] with a constant i, the first line
// each index is read on, and reports whether e is one.
func (l *linter) constIndex(e *ast.AttrGetExpr) bool {
	id, ok := e.Object.(*ast.IdentExpr)
	if !ok || l.sc.declared(id.Value) || (id.Value != "KEYS" && id.Value != "ARGV") {
		return false
	}
	n, ok := e.Key.(*ast.NumberExpr)
	if !ok {
		return false
	}
	i, err := strconv.Atoi(n.Value)
	if err != nil {
		return false
	}
	use := &l.keys
	if id.Value == "ARGV" {
		use = &l.args
	}
	if _, seen := use.lines[i]; !seen {
		use.lines[i] = line(e, id)
	}
	return true
}

func (l *linter) globalWrite(name string, line int) {
	if l.written[name] {
		return // the first assignment already fails in Redis
	}
	l.written[name] = true
	l.f.add(CheckGlobalWrite, line, l.f.wordCol(line, name),
		"assignment to global %s: Redis scripts cannot create or change globals (declare it local)", name)
}

// redisCall checks a redis.call or redis.pcall whose command is a string
// literal: forbidden commands, and key arguments that are literals or are
// built (from ARGV, or by concatenation) instead of passed in KEYS.
func (l *linter) redisCall(e *ast.FuncCallExpr) {
	fn, ok := e.Func.(*ast.AttrGetExpr)
	if !ok {
		return
	}
	obj, ok := fn.Object.(*ast.IdentExpr)
	key, ok2 := fn.Key.(*ast.StringExpr)
	if !ok || !ok2 || obj.Value != "redis" || l.sc.declared("redis") || (key.Value != "call" && key.Value != "pcall") {
		return
	}
	if len(e.Args) == 0 {
		return
	}
	cmdLit, ok := e.Args[0].(*ast.StringExpr)
	if !ok {
		return
	}
	ln := line(e, fn)
	name := strings.ToUpper(cmdLit.Value)
	callCol := l.f.col(ln, "redis."+key.Value)
	if why, bad := forbidden[name]; bad {
		l.f.add(CheckForbiddenCommand, ln, callCol, "%s %s", name, why)
	}
	// Key positions, from the literal arguments where they matter.
	fake := make([]string, len(e.Args))
	for i, a := range e.Args {
		switch a := a.(type) {
		case *ast.StringExpr:
			fake[i] = a.Value
		case *ast.NumberExpr:
			fake[i] = a.Value
		default:
			fake[i] = "\x00"
		}
	}
	if l.f.ttlCmd == "" && commandTTL(fake) == ttlSet {
		l.f.ttlCmd, l.f.ttlLine = ttlSpelling(fake), ln
	}
	for _, i := range keyIndexes(fake) {
		switch a := e.Args[i].(type) {
		case *ast.StringExpr:
			l.f.add(CheckUndeclaredKey, ln, l.f.col(ln, "'"+a.Value+"'", `"`+a.Value+`"`, a.Value),
				"%s uses the literal key %q: pass every key in KEYS (Redis Cluster routes a script by its KEYS)", name, a.Value)
		default:
			if mentions(a, "ARGV") && !mentions(a, "KEYS") {
				l.f.add(CheckUndeclaredKey, ln, callCol,
					"%s uses a key built from ARGV: pass every key in KEYS (Redis Cluster routes a script by its KEYS)", name)
			} else if isConcat(a) {
				l.f.add(CheckUndeclaredKey, ln, callCol,
					"%s uses a key built by concatenation, which is not one of KEYS: pass it in KEYS, sharing a {hash tag}", name)
			}
		}
	}
}

// mentions reports whether e reads the global or local named name.
func mentions(e ast.Expr, name string) bool {
	found := false
	var walk func(e ast.Expr)
	walk = func(e ast.Expr) {
		if found || e == nil {
			return
		}
		switch e := e.(type) {
		case *ast.IdentExpr:
			found = e.Value == name
		case *ast.AttrGetExpr:
			walk(e.Object)
			walk(e.Key)
		case *ast.FuncCallExpr:
			walk(e.Func)
			walk(e.Receiver)
			for _, a := range e.Args {
				walk(a)
			}
		case *ast.StringConcatOpExpr:
			walk(e.Lhs)
			walk(e.Rhs)
		case *ast.ArithmeticOpExpr:
			walk(e.Lhs)
			walk(e.Rhs)
		case *ast.LogicalOpExpr:
			walk(e.Lhs)
			walk(e.Rhs)
		}
	}
	walk(e)
	return found
}

func isConcat(e ast.Expr) bool {
	_, ok := e.(*ast.StringConcatOpExpr)
	return ok
}

// inputs reports declared KEYS/ARGV entries never read, and entries read
// but not declared. A variadic key or a list argument, always the last of
// its table, covers its own position and every one after it.
func (l *linter) inputs() {
	s := l.f.script
	if s == nil {
		return
	}
	for _, in := range []struct {
		table, ann string
		fields     []gen.Field
		use        inputUse
	}{
		{"KEYS", "@key", s.Keys, l.keys},
		{"ARGV", "@arg", s.Args, l.args},
	} {
		n := len(in.fields)
		open := n > 0 && in.fields[n-1].Variadic // KEYS[n..] or ARGV[n..] are declared
		if !in.use.dynamic {
			for i, fd := range in.fields {
				if fd.Variadic {
					if !in.use.readsFrom(i + 1) {
						l.f.add(CheckUnusedInput, fd.Line, fd.Col, "%s %s... is %s[%d..n], which the script never reads", in.ann, fd.Name, in.table, i+1)
					}
					continue
				}
				if _, used := in.use.lines[i+1]; !used {
					l.f.add(CheckUnusedInput, fd.Line, fd.Col, "%s %s is %s[%d], which the script never reads", in.ann, fd.Name, in.table, i+1)
				}
			}
		}
		for i, ln := range in.use.lines {
			if i >= 1 && (i <= n || open) {
				continue
			}
			col := l.f.col(ln, fmt.Sprintf("%s[%d]", in.table, i))
			if i < 1 {
				l.f.add(CheckUndeclaredInput, ln, col, "%s[%d] is never set: %s starts at %s[1]", in.table, i, in.table, in.table)
				continue
			}
			l.f.add(CheckUndeclaredInput, ln, col, "%s[%d] is not declared: the header has %d %s line(s)", in.table, i, n, in.ann)
		}
	}
}

// readsFrom reports whether the script reads a literal index >= from.
func (u inputUse) readsFrom(from int) bool {
	for i := range u.lines {
		if i >= from {
			return true
		}
	}
	return false
}

// replyShape compares the literal reply tables of the main chunk with the
// @return annotations.
func (l *linter) replyShape() {
	s := l.f.script
	if s == nil || len(s.Returns) == 0 {
		return
	}
	want, list := fixedReturns(s.Returns)
	for _, r := range l.returns {
		ln := r.Line()
		col := l.f.col(ln, "return")
		if len(r.Exprs) == 0 {
			l.f.add(CheckReplyShape, ln, col, "return without a value replies nil; the header declares %d @return element(s)", want)
			continue
		}
		switch e := r.Exprs[0].(type) {
		case *ast.TableExpr:
			n, exact := 0, true
			for i, f := range e.Fields {
				if f.Key != nil {
					exact = false // {err=...}, {ok=...} or a mixed table
					break
				}
				n++
				if i == len(e.Fields)-1 {
					switch f.Value.(type) {
					case *ast.FuncCallExpr, *ast.Comma3Expr:
						exact = false // expands to any number of values
					}
				}
			}
			switch {
			case exact && list && n < want:
				l.f.add(CheckReplyShape, ln, col, "reply has %d element(s); the header declares %d @return element(s) before its list", n, want)
			case exact && !list && n != want:
				l.f.add(CheckReplyShape, ln, col, "reply has %d element(s); the header declares %d @return element(s)", n, want)
			}
		case *ast.NumberExpr, *ast.StringExpr, *ast.TrueExpr, *ast.FalseExpr, *ast.NilExpr:
			l.f.add(CheckReplyShape, ln, col, "reply is a single value; the header declares %d @return element(s), replied as an array", want)
		}
	}
}

// ttlSpelling names the way a command that gives a TTL does it: "PEXPIRE",
// "SET ... PX", "GETEX ... EX".
func ttlSpelling(args []string) string {
	name := strings.ToUpper(args[0])
	if name == "SET" || name == "GETEX" {
		for _, a := range args[2:] {
			switch opt := strings.ToUpper(a); opt {
			case "EX", "PX", "EXAT", "PXAT":
				return name + " ... " + opt
			}
		}
	}
	return name
}
