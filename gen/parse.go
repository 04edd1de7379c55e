package gen

import (
	"bytes"
	"errors"
	"fmt"
	"go/token"
	"reflect"
	"sort"
	"strings"
	"unicode/utf8"

	lua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/ast"
	"github.com/yuin/gopher-lua/parse"
)

// Type is the type of an annotated argument or reply element.
type Type int

// The annotation types.
const (
	Int    Type = iota + 1 // int: a decimal integer (Go int64)
	Float                  // float: a decimal number (Go float64)
	String                 // string: any bytes (Go string)
	Bool                   // bool: 1/0 as an argument; 1, 0 or nil as a reply (Go bool)
)

var typeNames = map[string]Type{"int": Int, "float": Float, "string": String, "bool": Bool}

// String returns the annotation spelling of t.
func (t Type) String() string {
	switch t {
	case Int:
		return "int"
	case Float:
		return "float"
	case String:
		return "string"
	case Bool:
		return "bool"
	}
	return fmt.Sprintf("Type(%d)", int(t))
}

// Field is one annotated KEYS entry, ARGV entry or reply element.
type Field struct {
	Name     string // the annotation name, lower snake case
	GoName   string // the exported Go name derived from Name
	Doc      string // text after the name (and type) on the annotation line
	Type     Type   // String for keys
	Optional bool   // ARGV only: declared with a trailing '?'
	Variadic bool   // the last KEYS, ARGV or reply entry, declared with a trailing "...": it takes every remaining entry
	Line     int    // 1-based line of the annotation
	Col      int    // 1-based column of the name
}

// Script is a parsed, annotated Lua script.
type Script struct {
	Path     string // as given to Parse; used in error messages
	Name     string // @script NAME
	GoName   string // exported Go name derived from Name
	NameLine int    // position of NAME in the @script line
	NameCol  int
	Doc      string // the header's plain comment lines, one paragraph per blank line
	ReadOnly bool   // @readonly
	Keys     []Field
	Args     []Field
	Returns  []Field
	Source   []byte     // the file, byte for byte
	Chunk    []ast.Stmt // the Lua syntax tree from gopher-lua's parser
}

// Error is one problem in one source file.
type Error struct {
	Path string
	Line int // 1-based
	Col  int // 1-based
	Msg  string
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s:%d:%d: %s", e.Path, e.Line, e.Col, e.Msg)
}

// ErrorList is every problem found in one run, in file and line order.
type ErrorList []*Error

func (l ErrorList) Error() string {
	var b strings.Builder
	for i, e := range l {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.Error())
	}
	return b.String()
}

// Unwrap returns the problems, so errors.As can reach a *Error.
func (l ErrorList) Unwrap() []error {
	out := make([]error, len(l))
	for i, e := range l {
		out[i] = e
	}
	return out
}

// errs collects the problems of one file.
type errs struct {
	path string
	list ErrorList
}

func (e *errs) add(line, col int, format string, args ...any) {
	e.list = append(e.list, &Error{Path: e.path, Line: line, Col: col, Msg: fmt.Sprintf(format, args...)})
}

// Parse reads the annotations of one script and parses it as Lua. On failure
// the error is an ErrorList holding every problem found.
func Parse(path string, src []byte) (*Script, error) {
	e := &errs{path: path}
	s := &Script{Path: path, Source: src}

	if !utf8.Valid(src) {
		e.add(1, 1, "file is not valid UTF-8")
		return nil, e.list
	}
	chunk, err := parse.Parse(bytes.NewReader(src), path)
	if err != nil {
		pos := luaPositions(src)
		line, col, msg := 1, 1, oneLine(err.Error())
		var pe *parse.Error
		if errors.As(err, &pe) {
			if pe.Pos.Line <= 0 { // end of file
				line, col = endPos(src)
			} else {
				line, col = pos.at(pe.Pos.Line, pe.Pos.Column)
			}
			msg = oneLine(pe.Message)
			if pe.Token != "" {
				msg += fmt.Sprintf(" near %q", pe.Token)
			}
		}
		e.add(line, col, "Lua syntax error: %s", msg)
	} else {
		checkLua51(e, chunk, src)
	}
	s.Chunk = chunk

	parseHeader(s, src, e)

	if len(e.list) > 0 {
		sortErrors(e.list)
		return nil, e.list
	}
	return s, nil
}

// sortErrors puts l in file, line and column order, keeping the order of
// problems found at the same place.
func sortErrors(l ErrorList) {
	sort.SliceStable(l, func(i, j int) bool {
		a, b := l[i], l[j]
		if a.Path != b.Path {
			return a.Path < b.Path
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Col < b.Col
	})
}

// checkLua51 reports what gopher-lua's parser accepts but the Lua 5.1 of
// Redis rejects when it loads the script: goto statements and labels (Lua
// 5.2), and the errors Lua 5.1 finds while parsing but gopher-lua only while
// compiling (break outside a loop, ... outside a vararg function, too many
// locals).
func checkLua51(e *errs, chunk []ast.Stmt, src []byte) {
	pos := luaPositions(src)
	clamp := func(line int) int { l, _ := pos.at(line, 1); return l }
	found := false
	walkAST(reflect.ValueOf(chunk), func(n any) {
		switch n := n.(type) {
		case *ast.GotoStmt:
			found = true
			e.add(clamp(n.Line()), 1, "Lua syntax error: goto is not available in the Lua 5.1 of Redis")
		case *ast.LabelStmt:
			found = true
			e.add(clamp(n.Line()), 1, "Lua syntax error: labels (::%s::) are not available in the Lua 5.1 of Redis", n.Name)
		}
	})
	if found {
		return
	}
	if err := compileLua(chunk); err != nil {
		line := 1
		msg := err.Error()
		var ce *lua.CompileError
		if errors.As(err, &ce) {
			line, msg = ce.Line, ce.Message
		}
		e.add(clamp(line), 1, "Lua syntax error: %s", oneLine(msg))
	}
}

// compileLua compiles chunk with gopher-lua, turning any panic into an error.
func compileLua(chunk []ast.Stmt) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	_, err = lua.Compile(chunk, "script")
	return err
}

// walkAST calls visit for every pointer reachable from v: the nodes of a
// gopher-lua syntax tree.
func walkAST(v reflect.Value, visit func(any)) {
	switch v.Kind() {
	case reflect.Interface:
		if !v.IsNil() {
			walkAST(v.Elem(), visit)
		}
	case reflect.Pointer:
		if v.IsNil() {
			return
		}
		if v.CanInterface() {
			visit(v.Interface())
		}
		walkAST(v.Elem(), visit)
	case reflect.Slice:
		for i := 0; i < v.Len(); i++ {
			walkAST(v.Index(i), visit)
		}
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			walkAST(v.Field(i), visit)
		}
	}
}

// endPos is the line and column just past the last byte of src.
func endPos(src []byte) (int, int) {
	line := 1 + bytes.Count(src, []byte("\n"))
	last := src[bytes.LastIndexByte(src, '\n')+1:]
	return line, utf8.RuneCount(last) + 1
}

// oneLine trims s and replaces its line breaks with spaces, so that every
// error stays on one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// luaLines maps gopher-lua positions to ours. gopher-lua, like Lua, ends a
// line at "\n", "\r", "\r\n" or "\n\r" and counts columns in bytes; error
// positions here count lines ended by "\n" and columns in characters, as
// the annotation errors do.
type luaLines struct {
	src    []byte
	starts []int // byte offset of the start of each gopher-lua line
}

func luaPositions(src []byte) luaLines {
	starts := []int{0}
	for i := 0; i < len(src); i++ {
		c := src[i]
		if c != '\n' && c != '\r' {
			continue
		}
		if i+1 < len(src) && (c == '\n' && src[i+1] == '\r' || c == '\r' && src[i+1] == '\n') {
			i++
		}
		starts = append(starts, i+1)
	}
	return luaLines{src: src, starts: starts}
}

// at converts gopher-lua's 1-based line and byte column to our line and
// column, clamped to the file.
func (l luaLines) at(line, col int) (int, int) {
	line = max(1, min(line, len(l.starts)))
	off := l.starts[line-1] + max(col, 1) - 1
	off = min(off, len(l.src))
	before := l.src[:off]
	lineStart := bytes.LastIndexByte(before, '\n') + 1
	return 1 + bytes.Count(before, []byte("\n")), utf8.RuneCount(before[lineStart:]) + 1
}

// parseHeader reads the leading run of "--" line comments.
func parseHeader(s *Script, src []byte, e *errs) {
	h := &header{s: s, e: e,
		names:   map[string]map[string]bool{"key": {}, "arg": {}, "return": {}},
		goNames: map[string]goNameOverride{},
	}
	inHeader := true
	for i, raw := range strings.Split(string(src), "\n") {
		text := strings.TrimSuffix(raw, "\r")
		trimmed := strings.TrimLeft(text, " \t")
		isLineComment := strings.HasPrefix(trimmed, "--") && !strings.HasPrefix(trimmed, "--[[") && !isLongBracket(trimmed[2:])
		if !isLineComment {
			inHeader = false
			continue
		}
		h.comment(i+1, trimmed[2:], len(text)-len(trimmed)+3, inHeader)
	}
	if !h.seenScript {
		e.add(1, 1, "missing @script NAME annotation in the header comment")
	}
	s.Doc = joinDoc(h.doc)
	applyGoNames(s, e, h.goNames)
	s.Keys = uniqueGoNames(e, s.Keys, "key")
	s.Args = uniqueGoNames(e, s.Args, "arg")
	s.Returns = uniqueGoNames(e, s.Returns, "return")
}

// header is what parseHeader has read so far of a script's header.
type header struct {
	s              *Script
	e              *errs
	doc            []string // the plain comment lines before the first annotation
	seenAnnotation bool
	seenScript     bool
	names          map[string]map[string]bool // per section: annotation names declared
	goNames        map[string]goNameOverride  // @goname: annotation name -> Go name
	optionalSeen   bool                       // an optional @arg was declared
	variadicKey    string                     // the name of the variadic @key, once declared
	listArg        string                     // the name of the list @arg, once declared
	listReturn     string                     // the name of the list @return, once declared
}

// annotation is one annotation line: its words and their 1-based columns,
// and the text from the '@' on.
type annotation struct {
	line    int
	words   []string
	cols    []int
	body    string
	bodyCol int // the column of body's first byte
}

// comment reads the body of one "--" line comment, which starts at column
// bodyCol of line lineNo; inHeader reports that no other line came before
// it.
func (h *header) comment(lineNo int, body string, bodyCol int, inHeader bool) {
	ann := strings.TrimLeft(body, " \t")
	if !strings.HasPrefix(ann, "@") {
		if inHeader && !h.seenAnnotation {
			h.doc = append(h.doc, strings.TrimRight(strings.TrimPrefix(body, " "), " \t"))
		}
		return
	}
	bodyCol += len(body) - len(ann)
	if !inHeader {
		if knownDirective(ann) {
			h.e.add(lineNo, bodyCol, "annotation outside the header; annotations belong in the comment block at the top of the file")
		}
		return
	}
	h.seenAnnotation = true
	words, cols := fields(ann, bodyCol)
	a := annotation{line: lineNo, words: words, cols: cols, body: ann, bodyCol: bodyCol}
	switch words[0] {
	case "@script":
		h.script(a)
	case "@readonly":
		h.readOnly(a)
	case "@key":
		h.key(a)
	case "@arg":
		h.arg(a)
	case "@return":
		h.ret(a)
	case "@goname":
		h.goName(a)
	default:
		h.e.add(lineNo, cols[0], "unknown annotation %q; want @script, @key, @arg, @return, @readonly or @goname", words[0])
	}
}

// script reads "@script NAME".
func (h *header) script(a annotation) {
	if h.seenScript {
		h.e.add(a.line, a.cols[0], "@script given twice")
		return
	}
	h.seenScript = true
	if len(a.words) != 2 {
		h.e.add(a.line, a.cols[0], "@script takes exactly one name: @script NAME")
		return
	}
	if goName, ok := checkName(h.e, a.line, a.cols[1], a.words[1]); ok {
		h.s.Name, h.s.GoName = a.words[1], goName
		h.s.NameLine, h.s.NameCol = a.line, a.cols[1]
	}
}

// readOnly reads "@readonly".
func (h *header) readOnly(a annotation) {
	if len(a.words) != 1 {
		h.e.add(a.line, a.cols[1], "@readonly takes no arguments")
		return
	}
	if h.s.ReadOnly {
		h.e.add(a.line, a.cols[0], "@readonly given twice")
	}
	h.s.ReadOnly = true
}

// key reads "@key NAME[...] [description]".
func (h *header) key(a annotation) {
	if len(a.words) < 2 {
		h.e.add(a.line, a.cols[0], "@key needs a name: @key NAME [description]")
		return
	}
	f, ok := field(h.e, a.line, "@key", a.words, a.cols, a.body, a.bodyCol)
	if !ok {
		return
	}
	f.Type = String
	if h.variadicKey != "" {
		h.e.add(a.line, f.Col, "key %q after the variadic key %q; a variadic @key must be the last @key", f.Name, h.variadicKey)
		return
	}
	if checkDeclared(h.e, h.names["key"], f, "key") {
		h.s.Keys = append(h.s.Keys, f)
		if f.Variadic {
			h.variadicKey = f.Name
		}
	}
}

// typedField reads the field of "@arg" or "@return NAME TYPE [description]".
func (h *header) typedField(a annotation) (Field, bool) {
	directive := a.words[0]
	if len(a.words) < 3 {
		h.e.add(a.line, a.cols[0], "%s needs a name and a type: %s NAME TYPE [description]", directive, directive)
		return Field{}, false
	}
	return field(h.e, a.line, directive, a.words, a.cols, a.body, a.bodyCol)
}

// arg reads "@arg NAME TYPE[?|...] [description]".
func (h *header) arg(a annotation) {
	f, ok := h.typedField(a)
	if !ok {
		return
	}
	if h.listArg != "" {
		h.e.add(a.line, f.Col, "arg %q after the list argument %q; a list @arg must be the last @arg", f.Name, h.listArg)
		return
	}
	if f.Optional {
		h.optionalSeen = true
	} else if h.optionalSeen && !f.Variadic {
		h.e.add(a.line, f.Col, "required argument %q after an optional one; optional arguments come last", f.Name)
		return
	}
	if !checkDeclared(h.e, h.names["arg"], f, "arg") {
		return
	}
	h.s.Args = append(h.s.Args, f)
	if f.Variadic {
		h.listArg = f.Name
	}
}

// ret reads "@return NAME TYPE[...] [description]".
func (h *header) ret(a annotation) {
	f, ok := h.typedField(a)
	if !ok {
		return
	}
	if h.listReturn != "" {
		h.e.add(a.line, f.Col, "return %q after the list element %q; a list @return must be the last @return", f.Name, h.listReturn)
		return
	}
	if !checkDeclared(h.e, h.names["return"], f, "return") {
		return
	}
	h.s.Returns = append(h.s.Returns, f)
	if f.Variadic {
		h.listReturn = f.Name
	}
}

// goName reads "@goname NAME GoName".
func (h *header) goName(a annotation) {
	if len(a.words) != 3 {
		h.e.add(a.line, a.cols[0], "@goname takes a name and its Go name: @goname NAME GoName")
		return
	}
	name, goName := a.words[1], a.words[2]
	if !token.IsIdentifier(goName) || !token.IsExported(goName) {
		h.e.add(a.line, a.cols[2], "invalid Go name %q: want an exported Go identifier (a capital letter, then letters, digits or underscores)", goName)
		return
	}
	if prev, dup := h.goNames[name]; dup {
		h.e.add(a.line, a.cols[0], "@goname for %q given twice (first on line %d)", name, prev.line)
		return
	}
	h.goNames[name] = goNameOverride{goName: goName, line: a.line, col: a.cols[1]}
}

// goNameOverride is one @goname annotation.
type goNameOverride struct {
	goName    string
	line, col int
}

// applyGoNames gives the script and every field named in a @goname
// annotation the Go name it states.
func applyGoNames(s *Script, e *errs, overrides map[string]goNameOverride) {
	for name, o := range overrides {
		used := false
		if s.Name == name {
			s.GoName, used = o.goName, true
		}
		for _, fields := range []*[]Field{&s.Keys, &s.Args, &s.Returns} {
			for i := range *fields {
				if (*fields)[i].Name == name {
					(*fields)[i].GoName, used = o.goName, true
				}
			}
		}
		if !used {
			e.add(o.line, o.col, "@goname %q: no @script, @key, @arg or @return has that name", name)
		}
	}
}

// isLongBracket reports whether s starts a Lua long bracket such as [[ or [==[.
func isLongBracket(s string) bool {
	if !strings.HasPrefix(s, "[") {
		return false
	}
	s = strings.TrimLeft(s[1:], "=")
	return strings.HasPrefix(s, "[")
}

// fields splits s on spaces and tabs, returning each word's 1-based column.
func fields(s string, col0 int) ([]string, []int) {
	var words []string
	var cols []int
	i := 0
	for i < len(s) {
		for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
			i++
		}
		if i >= len(s) {
			break
		}
		start := i
		for i < len(s) && s[i] != ' ' && s[i] != '\t' {
			i++
		}
		words = append(words, s[start:i])
		cols = append(cols, col0+utf8.RuneCountInString(s[:start]))
	}
	return words, cols
}

// ellipsis marks a variadic @key (after the name), or a list @arg or
// @return (after the type).
const ellipsis = "..."

// field parses "@key NAME[...] [doc...]", "@arg NAME TYPE[?|...] [doc...]"
// or "@return NAME TYPE[...] [doc...]".
func field(e *errs, line int, directive string, words []string, cols []int, body string, bodyCol int) (Field, bool) {
	name := words[1]
	f := Field{Line: line, Col: cols[1]}
	if strings.HasSuffix(name, ellipsis) {
		dots := cols[1] + utf8.RuneCountInString(name) - len(ellipsis)
		switch directive {
		case "@key":
			name = strings.TrimSuffix(name, ellipsis)
			if name == "" {
				e.add(line, cols[1], "@key needs a name before '...': @key NAME... [description]")
				return f, false
			}
			f.Variadic = true
		case "@arg":
			e.add(line, dots, "'...' goes after the type, not the name: @arg NAME TYPE... [description]")
			return f, false
		default:
			e.add(line, dots, "'...' goes after the type, not the name: @return NAME TYPE... [description]")
			return f, false
		}
	}
	f.Name = name
	goName, ok := checkName(e, line, cols[1], name)
	if !ok {
		return f, false
	}
	f.GoName = goName
	docIdx := 2
	if directive != "@key" {
		t, tCol := words[2], cols[2]
		// The markers are looked for in both orders, so that "int?..." and
		// "int...?" get the same message.
		list, optional := false, false
		optCol := 0
		for range 2 {
			end := tCol + utf8.RuneCountInString(t)
			if !list && strings.HasSuffix(t, ellipsis) {
				list, t = true, strings.TrimSuffix(t, ellipsis)
			} else if !optional && strings.HasSuffix(t, "?") {
				optional, optCol, t = true, end-1, strings.TrimSuffix(t, "?")
			}
		}
		typ, known := typeNames[t]
		if !known {
			e.add(line, tCol, "unknown type %q; want int, float, string or bool", words[2])
			return f, false
		}
		switch {
		case directive == "@return" && optional:
			e.add(line, optCol, "reply elements cannot be optional; drop the '?'")
			return f, false
		case list && optional:
			e.add(line, optCol, "list arguments cannot be optional; drop the '?' (a list may be empty)")
			return f, false
		}
		f.Type, f.Optional, f.Variadic = typ, optional, list
		docIdx = 3
	}
	if docIdx < len(words) {
		if strings.HasPrefix(words[docIdx], ellipsis) {
			switch directive {
			case "@key":
				e.add(line, cols[docIdx], "'...' must follow the name without a space: @key NAME... [description]")
			case "@arg":
				e.add(line, cols[docIdx], "'...' must follow the type without a space: @arg NAME TYPE... [description]")
			default:
				e.add(line, cols[docIdx], "'...' must follow the type without a space: @return NAME TYPE... [description]")
			}
			return f, false
		}
		// Columns count runes; convert back to a byte offset in body.
		runeOff := cols[docIdx] - bodyCol
		f.Doc = strings.TrimSpace(string([]rune(body)[runeOff:]))
	}
	return f, true
}

// checkDeclared reports a second declaration of f's name in its section.
func checkDeclared(e *errs, names map[string]bool, f Field, what string) bool {
	if names[f.Name] {
		e.add(f.Line, f.Col, "%s %q declared twice", what, f.Name)
		return false
	}
	names[f.Name] = true
	return true
}

// uniqueGoNames drops, with an error, each field whose Go name an earlier
// field of its section has already.
func uniqueGoNames(e *errs, fields []Field, what string) []Field {
	seen := map[string]string{} // Go name -> annotation name
	out := fields[:0]
	for _, f := range fields {
		if prev, dup := seen[f.GoName]; dup {
			e.add(f.Line, f.Col, "%s %q collides with %s %q: both are %s in Go", what, f.Name, what, prev, f.GoName)
			continue
		}
		seen[f.GoName] = f.Name
		out = append(out, f)
	}
	return out
}

// checkName validates a lower snake case name and derives its Go name.
func checkName(e *errs, line, col int, name string) (string, bool) {
	goName, problem := deriveGoName(name)
	if problem != "" {
		e.add(line, col, "%s", problem)
		return "", false
	}
	return goName, true
}

// deriveGoName derives the exported Go identifier of an annotation name:
// each word capitalised, the underscores dropped, and the words that are Go
// initialisms (see sortedInitialisms) in capitals, as Go code spells them:
// "retry_after_ms" → "RetryAfterMs", "user_id" → "UserID", "gcra" →
// "GCRA", "urls" → "URLs". It returns a description of the problem when
// name is not lower snake case or is a Go keyword.
func deriveGoName(name string) (string, string) {
	if name == "" {
		return "", "empty name"
	}
	if token.Lookup(name).IsKeyword() {
		return "", fmt.Sprintf("name %q is a Go keyword; choose another", name)
	}
	for i, r := range name {
		ok := r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_'
		if !ok {
			return "", fmt.Sprintf("invalid name %q: use lower snake case, [a-z][a-z0-9]* joined by single underscores", name)
		}
		if i == 0 && !(r >= 'a' && r <= 'z') {
			return "", fmt.Sprintf("invalid name %q: must start with a lower-case letter", name)
		}
	}
	parts := strings.Split(name, "_")
	var b strings.Builder
	for _, p := range parts {
		if p == "" {
			return "", fmt.Sprintf("invalid name %q: underscores must separate words (no leading, trailing or double underscores)", name)
		}
		switch up := strings.ToUpper(p); {
		case initialisms[up]:
			b.WriteString(up)
		case len(p) > 2 && p[len(p)-1] == 's' && initialisms[up[:len(up)-1]]:
			b.WriteString(up[:len(up)-1] + "s") // "ids" → "IDs"
		default:
			b.WriteString(up[:1])
			b.WriteString(p[1:])
		}
	}
	return b.String(), ""
}

// sortedInitialisms lists the words deriveGoName writes in capitals: the
// initialisms of Go's naming convention that staticcheck knows (ST1003),
// and the algorithm names of sluice.
func sortedInitialisms() []string {
	out := make([]string, 0, len(initialisms))
	for w := range initialisms {
		out = append(out, w)
	}
	sort.Strings(out)
	return out
}

var initialisms = map[string]bool{
	"ACL": true, "AMQP": true, "API": true, "ASCII": true, "CPU": true, "CSS": true, "DB": true,
	"DNS": true, "EOF": true, "GCRA": true, "GID": true, "GUID": true, "HTML": true, "HTTP": true,
	"HTTPS": true, "ID": true, "IP": true, "JSON": true, "LHS": true, "QPS": true, "RAM": true,
	"RHS": true, "RPC": true, "RTP": true, "SIP": true, "SLA": true, "SMTP": true, "SQL": true,
	"SSH": true, "TCP": true, "TLS": true, "TS": true, "TTL": true, "UDP": true, "UI": true,
	"UID": true, "URI": true, "URL": true, "UTF8": true, "UUID": true, "VM": true, "XML": true,
	"XMPP": true, "XSRF": true, "XSS": true,
}

// joinDoc trims leading and trailing blank lines.
func joinDoc(lines []string) string {
	for len(lines) > 0 && strings.TrimSpace(lines[0]) == "" {
		lines = lines[1:]
	}
	for len(lines) > 0 && strings.TrimSpace(lines[len(lines)-1]) == "" {
		lines = lines[:len(lines)-1]
	}
	return strings.Join(lines, "\n")
}

// knownDirective reports whether body starts with one of the annotations.
func knownDirective(body string) bool {
	w, _ := fields(body, 1)
	switch w[0] {
	case "@script", "@readonly", "@key", "@arg", "@return", "@goname":
		return true
	}
	return false
}
