package verify

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/yuin/gopher-lua/ast"
	"github.com/yuin/gopher-lua/parse"

	"github.com/sluice-go/sluice/gen"
)

// The checks of Vet. Each finding names the check that made it; a comment
// "-- vet:ignore CHECK[,CHECK]" silences a check on its own line (or, alone
// on a line, on the next line), "-- vet:ignore-file CHECK[,CHECK]" in the
// whole file; "all" names every check.
const (
	// CheckSyntax: the script does not parse, or its annotations are wrong.
	CheckSyntax = "syntax"
	// CheckUndeclaredKey: a command touches a key that is not one of KEYS
	// (a literal, or built from ARGV or by concatenation).
	CheckUndeclaredKey = "undeclared-key"
	// CheckCrossSlot: the keys of one call hash to different cluster slots.
	CheckCrossSlot = "cross-slot"
	// CheckNoTTL: a key is written and, when the run ends, has no TTL:
	// neither this run nor an earlier one gave it one, or a command cleared
	// it.
	CheckNoTTL = "no-ttl"
	// CheckGlobalWrite: the script assigns a global variable, which is an
	// error in Redis.
	CheckGlobalWrite = "global-write"
	// CheckUndefinedGlobal: the script reads a global that does not exist,
	// which is an error in Redis (often a misspelt local).
	CheckUndefinedGlobal = "undefined-global"
	// CheckFloatReply: the reply holds a number that is not an integer,
	// which Redis truncates silently.
	CheckFloatReply = "float-reply"
	// CheckForbiddenCommand: the script sends a command that is not
	// allowed in scripts, not deterministic, or touches keys not in KEYS.
	CheckForbiddenCommand = "forbidden-command"
	// CheckUnusedInput: a declared @key or @arg is never read.
	CheckUnusedInput = "unused-input"
	// CheckUndeclaredInput: the script reads KEYS[n] or ARGV[n] beyond the
	// declared ones.
	CheckUndeclaredInput = "undeclared-input"
	// CheckReplyShape: the reply's arity or element types differ from the
	// @return annotations.
	CheckReplyShape = "reply-shape"
	// CheckReadonlyWrite: a @readonly script sends a write command.
	CheckReadonlyWrite = "readonly-write"
)

// CheckInfo names a check and says what it reports.
type CheckInfo struct {
	Name string // as in findings and vet:ignore comments
	Doc  string
}

// vetLoopTimeout is how long vet lets one sandbox run go before it calls
// the script an endless loop: far above any real script's run, so a
// loaded machine (a run of a few ms taking seconds) is not mistaken for
// one.
const vetLoopTimeout = 20 * time.Second

// Checks lists every check of Vet with what it reports.
func Checks() []CheckInfo {
	return []CheckInfo{
		{CheckSyntax, "the script does not parse, or its annotations are malformed"},
		{CheckUndeclaredKey, "a command touches a key that is not one of KEYS"},
		{CheckCrossSlot, "the keys of one call hash to different Redis Cluster slots"},
		{CheckNoTTL, "a key is written and left without a TTL"},
		{CheckGlobalWrite, "a global variable is assigned (an error in Redis)"},
		{CheckUndefinedGlobal, "an undefined global is read (an error in Redis)"},
		{CheckFloatReply, "the reply holds a non-integer number, which Redis truncates"},
		{CheckForbiddenCommand, "a command not allowed in scripts, not deterministic, or touching keys not in KEYS"},
		{CheckUnusedInput, "a declared @key or @arg is never read"},
		{CheckUndeclaredInput, "KEYS[n] or ARGV[n] is read beyond the declared entries"},
		{CheckReplyShape, "the reply's arity or types differ from the @return annotations"},
		{CheckReadonlyWrite, "a @readonly script sends a write command"},
	}
}

// Finding is one problem Vet found.
type Finding struct {
	Path  string
	Line  int // 1-based; 0 when unknown
	Col   int // 1-based; 0 when unknown
	Check string
	Msg   string
}

// String formats f as path:LINE:COL: message (check).
func (f Finding) String() string {
	switch {
	case f.Line > 0 && f.Col > 0:
		return fmt.Sprintf("%s:%d:%d: %s (%s)", f.Path, f.Line, f.Col, f.Msg, f.Check)
	case f.Line > 0:
		return fmt.Sprintf("%s:%d: %s (%s)", f.Path, f.Line, f.Msg, f.Check)
	}
	return fmt.Sprintf("%s: %s (%s)", f.Path, f.Msg, f.Check)
}

// ScriptPaths expands command-line arguments into .lua files: a file is
// taken as is, a directory gives its .lua files, and DIR/... those of DIR
// and its subdirectories (skipping testdata and names starting with . or
// _), as the go command does. The result is sorted and has no duplicates.
func ScriptPaths(args []string) ([]string, error) {
	seen := map[string]bool{}
	var out []string
	add := func(p string) {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	for _, arg := range args {
		if dir, ok := strings.CutSuffix(arg, "/..."); ok {
			if dir == "" {
				dir = "."
			}
			found := false
			err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
				if err != nil {
					return err
				}
				name := d.Name()
				if d.IsDir() {
					if p != dir && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
						return filepath.SkipDir
					}
					return nil
				}
				if strings.HasSuffix(name, ".lua") {
					add(p)
					found = true
				}
				return nil
			})
			if err != nil {
				return nil, fmt.Errorf("verify: %w", err)
			}
			if !found {
				return nil, fmt.Errorf("verify: no .lua files in %s", arg)
			}
			continue
		}
		info, err := os.Stat(arg)
		if err != nil {
			return nil, fmt.Errorf("verify: %w", err)
		}
		if !info.IsDir() {
			if !strings.HasSuffix(arg, ".lua") {
				return nil, fmt.Errorf("verify: %s is not a .lua file", arg)
			}
			add(arg)
			continue
		}
		entries, err := os.ReadDir(arg)
		if err != nil {
			return nil, fmt.Errorf("verify: %w", err)
		}
		found := false
		for _, e := range entries {
			if !e.IsDir() && strings.HasSuffix(e.Name(), ".lua") {
				add(filepath.Join(arg, e.Name()))
				found = true
			}
		}
		if !found {
			return nil, fmt.Errorf("verify: no .lua files in %s", arg)
		}
	}
	sort.Strings(out)
	return out, nil
}

// Vet checks every script named by paths (see ScriptPaths) and returns the
// findings in file and line order. The error is for paths that cannot be
// read.
func Vet(paths []string) ([]Finding, error) {
	files, err := ScriptPaths(paths)
	if err != nil {
		return nil, err
	}
	var all []Finding
	for _, p := range files {
		fs, err := VetFile(p)
		if err != nil {
			return nil, err
		}
		all = append(all, fs...)
	}
	return all, nil
}

// VetFile checks one script, with the steps of its step file when there is
// one (see StepFilePath).
func VetFile(path string) ([]Finding, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("verify: %w", err)
	}
	var steps *StepFile
	sp := StepFilePath(path)
	if data, err := os.ReadFile(sp); err == nil {
		sf, err := ParseStepFile(sp, data)
		if err != nil {
			return errorFindings(err), nil
		}
		steps = sf
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("verify: %w", err)
	}
	return VetSource(path, src, steps), nil
}

func errorFindings(err error) []Finding {
	var list gen.ErrorList
	if errors.As(err, &list) {
		out := make([]Finding, len(list))
		for i, e := range list {
			out[i] = Finding{Path: e.Path, Line: e.Line, Col: e.Col, Check: CheckSyntax, Msg: e.Msg}
		}
		return out
	}
	return []Finding{{Check: CheckSyntax, Msg: err.Error()}}
}

// VetSource checks the script src, reported as path. The run-time checks
// use the steps when given, else made-up runs: keys "{vet}:NAME" (a
// variadic key with none, one and three), arguments at typical values
// that differ from one position to the next, at 0, at 1 and at large
// values, optional arguments unset and set, a list argument with none,
// one, a few and one to three elements per variadic key; each input on an
// empty keyspace, again on what that run left (at once, and a second
// later), and on a keyspace seeded with a value of the type the script's
// commands use for every key it touched (a small integer, or the run's
// first argument, so comparisons with an argument can come out true), each
// with a TTL. Every run is judged on its own: a key it writes must have a
// TTL when it ends, given by this run or an earlier one.
//
// A script without annotations is checked too, without the checks that
// need them (unused-input, undeclared-input, reply-shape, readonly-write).
func VetSource(path string, src []byte, steps *StepFile) []Finding {
	f := &vetFile{path: path, src: src, lines: strings.Split(string(src), "\n")}
	script, err := gen.Parse(path, src)
	var chunk []ast.Stmt
	if err != nil {
		var list gen.ErrorList
		if !errors.As(err, &list) || len(list) != 1 || !strings.HasPrefix(list[0].Msg, "missing @script") {
			return errorFindings(err)
		}
		// No annotations at all: lint it as a plain script.
		chunk, err = parse.Parse(bytes.NewReader(src), path)
		if err != nil {
			return errorFindings(err)
		}
	} else {
		f.script = script
		chunk = script.Chunk
	}
	f.parseIgnores()
	lintStatic(f, chunk)
	f.static = map[string]bool{}
	for _, x := range f.findings {
		f.static[x.Path+":"+x.Check+":"+strconv.Itoa(x.Line)] = true
	}
	f.runtime(steps, chunk)
	return f.result()
}

// vetFile collects the findings of one script.
type vetFile struct {
	path      string
	src       []byte
	lines     []string
	script    *gen.Script // nil for a script without annotations
	findings  []Finding
	static    map[string]bool // check:line of static findings
	ignore    map[int]map[string]bool
	ignoreAll map[string]bool
	ttlCmd    string // the first command the script gives a TTL with ("PEXPIRE", "SET ... PX"), or ""
	ttlLine   int    // and its line
}

func (f *vetFile) add(check string, line, col int, format string, args ...any) {
	f.addAt(f.path, check, line, col, format, args...)
}

func (f *vetFile) addAt(path, check string, line, col int, format string, args ...any) {
	if f.static != nil {
		// At run time, one finding per check and line: a static finding
		// or an earlier run already covers it.
		k := path + ":" + check + ":" + strconv.Itoa(line)
		if f.static[k] {
			return
		}
		f.static[k] = true
	}
	f.findings = append(f.findings, Finding{Path: path, Line: line, Col: col, Check: check, Msg: fmt.Sprintf(format, args...)})
}

// col returns the 1-based column of the first of needles found on line,
// or of the line's first non-blank character.
func (f *vetFile) col(line int, needles ...string) int {
	if line < 1 || line > len(f.lines) {
		return 1
	}
	text := f.lines[line-1]
	for _, needle := range needles {
		if i := strings.Index(text, needle); i >= 0 && needle != "" {
			return utf8.RuneCountInString(text[:i]) + 1
		}
	}
	trimmed := strings.TrimLeft(text, " \t")
	return utf8.RuneCountInString(text[:len(text)-len(trimmed)]) + 1
}

// wordCol is col for an identifier: it skips matches inside longer words.
func (f *vetFile) wordCol(line int, name string) int {
	if line < 1 || line > len(f.lines) || name == "" {
		return f.col(line, name)
	}
	text := f.lines[line-1]
	isWord := func(b byte) bool {
		return b == '_' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9'
	}
	for from := 0; from < len(text); {
		i := strings.Index(text[from:], name)
		if i < 0 {
			break
		}
		i += from
		end := i + len(name)
		if (i == 0 || !isWord(text[i-1])) && (end == len(text) || !isWord(text[end])) {
			return utf8.RuneCountInString(text[:i]) + 1
		}
		from = i + 1
	}
	return f.col(line, name)
}

func (f *vetFile) parseIgnores() {
	f.ignore = map[int]map[string]bool{}
	f.ignoreAll = map[string]bool{}
	for i, text := range f.lines {
		idx := strings.Index(text, "--")
		if idx < 0 {
			continue
		}
		comment := strings.TrimSpace(text[idx+2:])
		var file bool
		var list string
		if rest, ok := strings.CutPrefix(comment, "vet:ignore-file"); ok {
			file, list = true, rest
		} else if rest, ok := strings.CutPrefix(comment, "vet:ignore"); ok {
			list = rest
		} else {
			continue
		}
		checks := map[string]bool{}
		for _, c := range strings.FieldsFunc(list, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' }) {
			checks[c] = true
		}
		if len(checks) == 0 {
			checks["all"] = true
		}
		for c := range checks {
			if file {
				f.ignoreAll[c] = true
				continue
			}
			for _, ln := range []int{i + 1, i + 2} {
				if f.ignore[ln] == nil {
					f.ignore[ln] = map[string]bool{}
				}
				f.ignore[ln][c] = true
			}
		}
	}
}

func (f *vetFile) ignored(x Finding) bool {
	if x.Path != f.path {
		return false
	}
	if f.ignoreAll["all"] || f.ignoreAll[x.Check] {
		return true
	}
	m := f.ignore[x.Line]
	return m["all"] || m[x.Check]
}

func (f *vetFile) result() []Finding {
	seen := map[string]bool{}
	var out []Finding
	for _, x := range f.findings {
		k := x.String()
		if seen[k] || f.ignored(x) {
			continue
		}
		seen[k] = true
		out = append(out, x)
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Path != b.Path {
			return a.Path < b.Path
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Col < b.Col
	})
	return out
}

// runtime runs the script in a sandbox and applies the run-time checks to
// every run: the steps of the step file, else made-up runs (see explore).
func (f *vetFile) runtime(steps *StepFile, chunk []ast.Stmt) {
	sb, err := NewSandbox()
	if err != nil {
		f.add(CheckSyntax, 0, 0, "cannot start the sandbox: %v", err)
		return
	}
	defer sb.Close()
	sb.Timeout = vetLoopTimeout
	ctx := context.Background()
	script := string(f.src)
	if steps == nil {
		f.explore(ctx, sb, script, chunk)
		return
	}
	for _, st := range steps.Steps {
		at := StartTime.Add(st.At)
		keys, args := expand(st.Keys, at), expand(st.Args, at)
		if slots := distinctSlots(keys); len(slots) > 1 {
			f.addAt(steps.Path, CheckCrossSlot, st.Line, 1, "step %q passes KEYS in different cluster slots (%s): give them one {hash tag}", st.Name, slots)
		}
		_ = sb.SetTime(ctx, at)
		for _, c := range st.Do {
			_, _ = sb.Do(ctx, expand(c.Args, at)...)
		}
		before := sb.expiries()
		run, err := sb.Run(ctx, script, keys, args)
		if err != nil {
			f.addAt(steps.Path, CheckSyntax, st.Line, 1, "step %q: the script did not finish within %v in the sandbox (an endless loop?)", st.Name, sb.Timeout)
			return
		}
		f.checkRun(run, before, sb.expiries(), true)
	}
}

func maxIndex(m map[int]int) int {
	n := 0
	for i := range m {
		n = max(n, i)
	}
	return min(n, 64)
}

func distinctSlots(keys []string) string {
	var parts []string
	seen := map[int]bool{}
	for _, k := range keys {
		s := Slot(k)
		if !seen[s] {
			seen[s] = true
			parts = append(parts, fmt.Sprintf("%q: %d", k, s))
		}
	}
	if len(parts) < 2 {
		return ""
	}
	return strings.Join(parts, ", ")
}

// checkRun applies the run-time checks to one run. before and after are
// the keys with their TTLs (0: none) before and after the run: a key the
// run writes must have a TTL when the run ends, whether this run gave it
// one or an earlier run did.
//
// With valueChecks false, the checks of reply values (float-reply,
// reply-shape) are left out.
func (f *vetFile) checkRun(run *Run, before, after map[string]time.Duration, valueChecks bool) {
	inKeys := map[string]bool{}
	for _, k := range run.Keys {
		inKeys[k] = true
	}
	w := keyWrites{needTTL: map[string]*pendingTTL{}}
	for i := range run.Calls {
		c := &run.Calls[i]
		keys := f.checkCall(c, inKeys)
		if c.Reply.Kind != KindError {
			w.record(c, keys)
		}
	}
	f.checkTTLs(&w, before, after)
	f.checkGlobals(run)
	if !valueChecks {
		return
	}
	for _, x := range run.Floats {
		f.add(CheckFloatReply, x.Line, f.col(x.Line, "return"), "%s is %s, not an integer: Redis replies %d (keep arithmetic in integers; math.floor, or return a string)", f.elementName(x.Path), formatG(x.Value, -1), x.Sent)
	}
	f.checkReplyTypes(run)
}

// checkCall applies the checks of one command the run sent: a forbidden
// command, a write from a @readonly script, keys not in KEYS (inKeys) or
// in different slots. It returns the command's keys.
func (f *vetFile) checkCall(c *Call, inKeys map[string]bool) []string {
	name := c.Name()
	col := f.col(c.Line, "redis.")
	if why, bad := forbidden[name]; bad {
		f.add(CheckForbiddenCommand, c.Line, col, "%s %s", name, why)
	}
	if f.script != nil && f.script.ReadOnly && isWriteCommand(name) {
		f.add(CheckReadonlyWrite, c.Line, col, "the script is @readonly but sends %s, a write command (EVALSHA_RO refuses it)", name)
	}
	keys := commandKeys(c.Args)
	for _, k := range keys {
		if !inKeys[k] {
			f.add(CheckUndeclaredKey, c.Line, col, "%s touches key %q, which is not one of KEYS: pass every key in KEYS (Redis Cluster routes a script by its KEYS)", name, k)
		}
	}
	if slots := distinctSlots(keys); slots != "" {
		f.add(CheckCrossSlot, c.Line, col, "%s has keys in different cluster slots (%s): give them one {hash tag}", name, slots)
	}
	return keys
}

// keyWrites follows, for each key written since the last command that gave
// it a TTL, the first such write and the last command that cleared its
// TTL, in the order the keys were first written.
type keyWrites struct {
	needTTL map[string]*pendingTTL
	order   []string
}

// pendingTTL is a key's first write and last TTL clear, as keyWrites follows
// them.
type pendingTTL struct {
	first, clear *Call
}

// record follows c, a command that succeeded, whose keys are keys.
func (w *keyWrites) record(c *Call, keys []string) {
	name := c.Name()
	effect := commandTTL(c.Args)
	if effect == ttlSet || name == "DEL" || name == "UNLINK" || name == "GETDEL" {
		for _, k := range keys {
			delete(w.needTTL, k)
		}
		return
	}
	targets := writtenKeys(c.Args)
	if effect == ttlClear && len(targets) == 0 {
		targets = keys
	}
	for _, k := range targets {
		p, ok := w.needTTL[k]
		if !ok {
			p = &pendingTTL{first: c}
			w.needTTL[k] = p
			w.order = append(w.order, k)
		}
		if effect == ttlClear {
			p.clear = c
		}
	}
}

// checkTTLs reports each key w saw written that has no TTL after the run
// (after) though it still exists: by the command that cleared the TTL it
// had before the run (before), else by its first write.
func (f *vetFile) checkTTLs(w *keyWrites, before, after map[string]time.Duration) {
	for _, k := range w.order {
		p, ok := w.needTTL[k]
		if !ok {
			continue
		}
		delete(w.needTTL, k)
		if ttl, exists := after[k]; !exists || ttl > 0 {
			continue // gone, or it has a TTL (given now or by an earlier run)
		}
		if had, ok := before[k]; ok && had > 0 && p.clear != nil {
			c := p.clear
			f.add(CheckNoTTL, c.Line, f.col(c.Line, "redis."), "%s clears the TTL of key %q and nothing gives it a new one: it would stay forever (%s)", c.Name(), k, clearHint(c.Name()))
			continue
		}
		c := p.first
		f.add(CheckNoTTL, c.Line, f.col(c.Line, "redis."), "%s writes key %q and leaves it without a TTL: it would stay forever (%s)", c.Name(), k, f.ttlHint(c.Name()))
	}
}

// checkGlobals reports the globals the run assigned or read undefined.
func (f *vetFile) checkGlobals(run *Run) {
	for _, g := range run.Globals {
		if g.Write {
			f.add(CheckGlobalWrite, g.Line, f.wordCol(g.Line, g.Name), "assignment to global %s: Redis scripts cannot create or change globals (declare it local)", g.Name)
		} else {
			f.add(CheckUndefinedGlobal, g.Line, f.wordCol(g.Line, g.Name), "%s is not defined: a global that does not exist is an error in Redis (declare it local)", g.Name)
		}
	}
}

// ttlHint suggests how to give a key written by cmd a TTL, naming the
// command the script already uses for TTLs when it has one.
func (f *vetFile) ttlHint(cmd string) string {
	if f.ttlCmd != "" {
		return fmt.Sprintf("give it one with %s, as line %d does", f.ttlCmd, f.ttlLine)
	}
	switch cmd {
	case "SET":
		return "add PX or EX to the SET, or PEXPIRE after it"
	case "SETNX":
		return "use SET with NX and PX instead"
	}
	return "give it one with PEXPIRE or EXPIRE after the write"
}

// clearHint tells how to keep a key's TTL through cmd, which clears it.
func clearHint(cmd string) string {
	switch cmd {
	case "SET":
		return "add KEEPTTL to keep the TTL, or PX or EX to give a new one"
	case "GETSET":
		return "use SET with GET and KEEPTTL instead"
	case "PERSIST":
		return "drop the PERSIST, or give the key a TTL after it"
	case "GETEX":
		return "drop PERSIST from the GETEX"
	}
	return "give it a TTL again after the write"
}

// elementName describes the reply element at path.
func (f *vetFile) elementName(path []int) string {
	if len(path) == 0 {
		return "the reply"
	}
	if len(path) == 1 && f.script != nil && len(f.script.Returns) > 0 {
		if ret, ok := returnAt(f.script.Returns, path[0]); ok {
			return fmt.Sprintf("reply element %d (%s)", path[0]+1, ret.Name)
		}
	}
	parts := make([]string, len(path))
	for i, p := range path {
		parts[i] = strconv.Itoa(p + 1)
	}
	return "reply element " + strings.Join(parts, ".")
}

// checkReplyTypes compares a reply with the @return annotations.
func (f *vetFile) checkReplyTypes(run *Run) {
	s := f.script
	if s == nil || len(s.Returns) == 0 || run.Reply.Kind == KindError || run.ReturnLine == 0 {
		return
	}
	ln := run.ReturnLine
	col := f.col(ln, "return")
	r := run.Reply
	if r.Kind != KindArray {
		f.add(CheckReplyShape, ln, col, "reply is %s, not an array of the %d @return element(s)", withArticle(r.Kind.String()), len(s.Returns))
		return
	}
	fixed, list := fixedReturns(s.Returns)
	switch {
	case list && len(r.Elems) < fixed:
		f.add(CheckReplyShape, ln, col, "reply has %d element(s); the header declares %d @return element(s) before its list", len(r.Elems), fixed)
		return
	case !list && len(r.Elems) != fixed:
		f.add(CheckReplyShape, ln, col, "reply has %d element(s); the header declares %d @return element(s)", len(r.Elems), fixed)
		return
	}
	for i, e := range r.Elems {
		ret, _ := returnAt(s.Returns, i)
		ok := true
		switch ret.Type {
		case gen.Int:
			ok = e.Kind == KindInt
		case gen.Bool:
			ok = e.Kind == KindNil || e.Kind == KindInt && (e.Int == 0 || e.Int == 1)
		case gen.String:
			ok = e.Kind == KindBulk
		case gen.Float:
			if e.Kind == KindBulk {
				_, err := strconv.ParseFloat(e.Str, 64)
				ok = err == nil
			} else {
				ok = e.Kind == KindInt
			}
		}
		if !ok {
			f.add(CheckReplyShape, ln, col, "reply element %d (%s) is %s, not %s", i+1, ret.Name, withArticle(e.Kind.String()), withArticle(ret.Type.String()))
		}
	}
}

// fixedReturns counts the @return elements before a list, and reports
// whether the last one is a list.
func fixedReturns(rs []gen.Field) (fixed int, list bool) {
	if n := len(rs); n > 0 && rs[n-1].Variadic {
		return n - 1, true
	}
	return len(rs), false
}

// returnAt is the @return that declares reply element i (0-based): a list,
// the last @return, declares every element from its position on.
func returnAt(rs []gen.Field, i int) (gen.Field, bool) {
	fixed, list := fixedReturns(rs)
	switch {
	case i < fixed:
		return rs[i], true
	case list:
		return rs[fixed], true
	}
	return gen.Field{}, false
}

func withArticle(s string) string {
	switch s {
	case "nil":
		return s
	case "int", "integer", "array", "error":
		return "an " + s
	}
	return "a " + s
}
