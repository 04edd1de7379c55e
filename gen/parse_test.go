package gen_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/sluice-go/sluice/gen"
)

// h is a valid first header line.
const h = "-- @script s\n"

// parseErrorCases covers every message Parse can produce, with the exact
// position of each. docs/annotations.md lists every message found here.
var parseErrorCases = []struct {
	name string
	src  string
	want []string
}{
	// The header and @script.
	{"empty file", "", []string{
		"t.lua:1:1: missing @script NAME annotation in the header comment"}},
	{"no @script", "-- Doc only.\n-- @key k\nreturn 1\n", []string{
		"t.lua:1:1: missing @script NAME annotation in the header comment"}},
	{"@script twice", h + "-- @script t\n", []string{
		"t.lua:2:4: @script given twice"}},
	{"@script without name", "-- @script\n", []string{
		"t.lua:1:4: @script takes exactly one name: @script NAME"}},
	{"@script with two names", "-- @script a b\n", []string{
		"t.lua:1:4: @script takes exactly one name: @script NAME"}},
	{"unknown annotation", h + "-- @keys k\n", []string{
		`t.lua:2:4: unknown annotation "@keys"; want @script, @key, @arg, @return, @readonly or @goname`}},
	{"lone @", h + "-- @\n", []string{
		`t.lua:2:4: unknown annotation "@"; want @script, @key, @arg, @return, @readonly or @goname`}},
	{"annotation after the code", h + "return 1\n-- @key late\n", []string{
		"t.lua:3:4: annotation outside the header; annotations belong in the comment block at the top of the file"}},
	{"annotation after a blank line", h + "\n-- @arg n int\n", []string{
		"t.lua:3:4: annotation outside the header; annotations belong in the comment block at the top of the file"}},
	{"header after a blank first line", "\n-- @script s\n", []string{
		"t.lua:1:1: missing @script NAME annotation in the header comment",
		"t.lua:2:4: annotation outside the header; annotations belong in the comment block at the top of the file"}},
	{"annotation inside a block comment header", "--[[\n@script s\n]]\n-- @script s\n", []string{
		"t.lua:1:1: missing @script NAME annotation in the header comment",
		"t.lua:4:4: annotation outside the header; annotations belong in the comment block at the top of the file"}},
	{"@readonly with an argument", h + "-- @readonly yes\n", []string{
		"t.lua:2:14: @readonly takes no arguments"}},
	{"@readonly twice", h + "-- @readonly\n-- @readonly\n", []string{
		"t.lua:3:4: @readonly given twice"}},

	// Missing parts.
	{"@key without name", h + "-- @key\n", []string{
		"t.lua:2:4: @key needs a name: @key NAME [description]"}},
	{"@arg without type", h + "-- @arg n\n", []string{
		"t.lua:2:4: @arg needs a name and a type: @arg NAME TYPE [description]"}},
	{"@arg without name", h + "-- @arg\n", []string{
		"t.lua:2:4: @arg needs a name and a type: @arg NAME TYPE [description]"}},
	{"@return without type", h + "-- @return ok\n", []string{
		"t.lua:2:4: @return needs a name and a type: @return NAME TYPE [description]"}},

	// Names of each kind.
	{"script name with capitals", "-- @script Gcra\n", []string{
		`t.lua:1:12: invalid name "Gcra": use lower snake case, [a-z][a-z0-9]* joined by single underscores`}},
	{"key name with a dash", h + "-- @key rate-key\n", []string{
		`t.lua:2:9: invalid name "rate-key": use lower snake case, [a-z][a-z0-9]* joined by single underscores`}},
	{"key name with a '?'", h + "-- @key k?\n", []string{
		`t.lua:2:9: invalid name "k?": use lower snake case, [a-z][a-z0-9]* joined by single underscores`}},
	{"arg name starting with a digit", h + "-- @arg 2nd int\n", []string{
		`t.lua:2:9: invalid name "2nd": must start with a lower-case letter`}},
	{"arg name starting with an underscore", h + "-- @arg _n int\n", []string{
		`t.lua:2:9: invalid name "_n": must start with a lower-case letter`}},
	{"return name with a double underscore", h + "-- @return a__b int\n", []string{
		`t.lua:2:12: invalid name "a__b": underscores must separate words (no leading, trailing or double underscores)`}},
	{"return name with a trailing underscore", h + "-- @return a_ int\n", []string{
		`t.lua:2:12: invalid name "a_": underscores must separate words (no leading, trailing or double underscores)`}},
	{"non-ASCII name", h + "-- @arg größe int\n", []string{
		`t.lua:2:9: invalid name "größe": use lower snake case, [a-z][a-z0-9]* joined by single underscores`}},
	{"script name is a Go keyword", "-- @script type\n", []string{
		`t.lua:1:12: name "type" is a Go keyword; choose another`}},
	{"key name is a Go keyword", h + "-- @key range\n", []string{
		`t.lua:2:9: name "range" is a Go keyword; choose another`}},
	{"arg name is a Go keyword", h + "-- @arg func int\n", []string{
		`t.lua:2:9: name "func" is a Go keyword; choose another`}},
	{"return name is a Go keyword", h + "-- @return go bool\n", []string{
		`t.lua:2:12: name "go" is a Go keyword; choose another`}},

	// Types.
	{"unknown arg type", h + "-- @arg n integer\n", []string{
		`t.lua:2:11: unknown type "integer"; want int, float, string or bool`}},
	{"unknown optional arg type", h + "-- @arg n integer?\n", []string{
		`t.lua:2:11: unknown type "integer?"; want int, float, string or bool`}},
	{"type is only a '?'", h + "-- @arg n ?\n", []string{
		`t.lua:2:11: unknown type "?"; want int, float, string or bool`}},
	{"types are lower case", h + "-- @return n Int\n", []string{
		`t.lua:2:14: unknown type "Int"; want int, float, string or bool`}},
	{"optional return", h + "-- @return n int?\n", []string{
		"t.lua:2:17: reply elements cannot be optional; drop the '?'"}},
	{"required arg after an optional one", h + "-- @arg a int?\n-- @arg b int\n-- @arg c int?\n", []string{
		`t.lua:3:9: required argument "b" after an optional one; optional arguments come last`}},

	// Variadic keys and list arguments.
	{"variadic key not last", h + "-- @key shards...\n-- @key lock\n", []string{
		`t.lua:3:9: key "lock" after the variadic key "shards"; a variadic @key must be the last @key`}},
	{"two variadic keys", h + "-- @key a...\n-- @key b...\n", []string{
		`t.lua:3:9: key "b" after the variadic key "a"; a variadic @key must be the last @key`}},
	{"variadic key without a name", h + "-- @key ...\n", []string{
		"t.lua:2:9: @key needs a name before '...': @key NAME... [description]"}},
	{"space before a key's '...'", h + "-- @key k ...\n", []string{
		"t.lua:2:11: '...' must follow the name without a space: @key NAME... [description]"}},
	{"key name ending in four dots", h + "-- @key k....\n", []string{
		`t.lua:2:9: invalid name "k.": use lower snake case, [a-z][a-z0-9]* joined by single underscores`}},
	{"list arg not last", h + "-- @arg limits int...\n-- @arg cost int\n", []string{
		`t.lua:3:9: arg "cost" after the list argument "limits"; a list @arg must be the last @arg`}},
	{"optional arg after a list arg", h + "-- @arg limits int...\n-- @arg now int?\n", []string{
		`t.lua:3:9: arg "now" after the list argument "limits"; a list @arg must be the last @arg`}},
	{"optional list arg", h + "-- @arg l int?...\n", []string{
		"t.lua:2:14: list arguments cannot be optional; drop the '?' (a list may be empty)"}},
	{"optional list arg, '?' last", h + "-- @arg l int...?\n", []string{
		"t.lua:2:17: list arguments cannot be optional; drop the '?' (a list may be empty)"}},
	{"list marker after an arg name", h + "-- @arg limits... int\n", []string{
		"t.lua:2:15: '...' goes after the type, not the name: @arg NAME TYPE... [description]"}},
	{"space before an arg's '...'", h + "-- @arg n int ...\n", []string{
		"t.lua:2:15: '...' must follow the type without a space: @arg NAME TYPE... [description]"}},
	{"unknown list type", h + "-- @arg n integer...\n", []string{
		`t.lua:2:11: unknown type "integer..."; want int, float, string or bool`}},
	{"type with four dots", h + "-- @arg n int....\n", []string{
		`t.lua:2:11: unknown type "int...."; want int, float, string or bool`}},
	{"return after a list return", h + "-- @return v int...\n-- @return w int\n", []string{
		`t.lua:3:12: return "w" after the list element "v"; a list @return must be the last @return`}},
	{"optional list return", h + "-- @return v int...?\n", []string{
		"t.lua:2:20: reply elements cannot be optional; drop the '?'"}},
	{"list marker after a return name", h + "-- @return v... int\n", []string{
		"t.lua:2:13: '...' goes after the type, not the name: @return NAME TYPE... [description]"}},
	{"space before a return's '...'", h + "-- @return v int ...\n", []string{
		"t.lua:2:18: '...' must follow the type without a space: @return NAME TYPE... [description]"}},
	{"variadic script name", "-- @script s...\n", []string{
		`t.lua:1:12: invalid name "s...": use lower snake case, [a-z][a-z0-9]* joined by single underscores`}},

	// Duplicates and collisions, per section.
	{"duplicate key", h + "-- @key k\n-- @key k\n", []string{
		`t.lua:3:9: key "k" declared twice`}},
	{"duplicate arg", h + "-- @arg a int\n-- @arg a string\n", []string{
		`t.lua:3:9: arg "a" declared twice`}},
	{"duplicate return", h + "-- @return r int\n-- @return r int\n", []string{
		`t.lua:3:12: return "r" declared twice`}},
	{"colliding keys", h + "-- @key shard_1\n-- @key shard1\n", []string{
		`t.lua:3:9: key "shard1" collides with key "shard_1": both are Shard1 in Go`}},
	{"colliding args", h + "-- @arg a_1b int\n-- @arg a1b int\n", []string{
		`t.lua:3:9: arg "a1b" collides with arg "a_1b": both are A1b in Go`}},
	{"colliding returns", h + "-- @return v2 int\n-- @return v_2 int\n", []string{
		`t.lua:3:12: return "v_2" collides with return "v2": both are V2 in Go`}},

	// Positions: indentation, tabs and multi-byte characters before a word.
	{"indented header", "  -- @script s\n  -- @key K\n", []string{
		`t.lua:2:11: invalid name "K": use lower snake case, [a-z][a-z0-9]* joined by single underscores`}},
	{"tabs", h + "--\t@arg\tn\tnumber\n", []string{
		`t.lua:2:11: unknown type "number"; want int, float, string or bool`}},
	{"no space after --", h + "--@arg n number\n", []string{
		`t.lua:2:10: unknown type "number"; want int, float, string or bool`}},
	{"CRLF line endings", "-- @script s\r\n-- @arg n number\r\n", []string{
		`t.lua:2:11: unknown type "number"; want int, float, string or bool`}},

	// Encoding and Lua syntax.
	{"invalid UTF-8", h + "return '\xff'\n", []string{
		"t.lua:1:1: file is not valid UTF-8"}},
	{"Lua syntax error", h + "local x = = 1\n", []string{
		`t.lua:2:11: Lua syntax error: syntax error near "="`}},
	{"Lua syntax error after an annotation error", h + "-- @arg n number\nreturn 1 +* 2\n", []string{
		`t.lua:2:11: unknown type "number"; want int, float, string or bool`,
		`t.lua:3:11: Lua syntax error: syntax error near "*"`}},
	{"Lua syntax error at the end of the file", h + "if x then\n  return 1\n", []string{
		`t.lua:4:1: Lua syntax error: syntax error near "1"`}},
	{"Lua syntax error at the end of a file without newline", h + "return (", []string{
		`t.lua:2:9: Lua syntax error: syntax error near "("`}},
	{"unterminated string", h + "return 'abc", []string{
		`t.lua:2:12: Lua syntax error: unterminated string near "abc"`}},
	{"unterminated long comment", h + "--[[ never closed\nreturn 1\n", []string{
		`t.lua:4:1: Lua syntax error: invalid multiline comment near " never closed\nreturn 1\n"`}},
	{"bad hexadecimal number", h + "return 0x\n", []string{
		`t.lua:2:9: Lua syntax error: illegal hexadecimal number near "0x"`}},
	{"NUL byte in code", h + "return \x00\n", []string{
		`t.lua:2:8: Lua syntax error: Invalid token near "\x00"`}},
	{"break outside a loop", h + "\nbreak\n", []string{
		"t.lua:3:1: Lua syntax error: no loop to break"}},
	{"vararg outside a vararg function", h + "local function f()\n  return ...\nend\n", []string{
		"t.lua:3:1: Lua syntax error: cannot use '...' outside a vararg function"}},
	// @goname.
	{"@goname without a Go name", h + "-- @key k\n-- @goname k\n", []string{
		"t.lua:3:4: @goname takes a name and its Go name: @goname NAME GoName"}},
	{"@goname with three words", h + "-- @key k\n-- @goname k K extra\n", []string{
		"t.lua:3:4: @goname takes a name and its Go name: @goname NAME GoName"}},
	{"@goname not exported", h + "-- @key k\n-- @goname k key\n", []string{
		`t.lua:3:14: invalid Go name "key": want an exported Go identifier (a capital letter, then letters, digits or underscores)`}},
	{"@goname not an identifier", h + "-- @key k\n-- @goname k Key-1\n", []string{
		`t.lua:3:14: invalid Go name "Key-1": want an exported Go identifier (a capital letter, then letters, digits or underscores)`}},
	{"@goname twice", h + "-- @key k\n-- @goname k K1\n-- @goname k K2\n", []string{
		`t.lua:4:4: @goname for "k" given twice (first on line 3)`}},
	{"@goname of nothing", h + "-- @key k\n-- @goname kk K\n", []string{
		`t.lua:3:12: @goname "kk": no @script, @key, @arg or @return has that name`}},
	{"@goname makes a collision", h + "-- @arg a int\n-- @arg b int\n-- @goname b A\n", []string{
		`t.lua:3:9: arg "b" collides with arg "a": both are A in Go`}},
	{"goto", h + "for i = 1, 3 do\n  goto continue\n  ::continue::\nend\n", []string{
		"t.lua:3:1: Lua syntax error: goto is not available in the Lua 5.1 of Redis",
		"t.lua:4:1: Lua syntax error: labels (::continue::) are not available in the Lua 5.1 of Redis"}},
}

// TestParseErrors checks the exact errors of every case of parseErrorCases.
func TestParseErrors(t *testing.T) {
	for _, tt := range parseErrorCases {
		t.Run(tt.name, func(t *testing.T) {
			s, err := gen.Parse("t.lua", []byte(tt.src))
			if err == nil {
				t.Fatalf("Parse succeeded (script %q), want errors:\n%s", s.Name, strings.Join(tt.want, "\n"))
			}
			if s != nil {
				t.Errorf("Parse returned a script together with an error")
			}
			var list gen.ErrorList
			if !errors.As(err, &list) {
				t.Fatalf("error is %T, not gen.ErrorList: %v", err, err)
			}
			var got []string
			for _, e := range list {
				got = append(got, e.Error())
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
			if err.Error() != strings.Join(tt.want, "\n") {
				t.Errorf("ErrorList.Error() = %q, want the lines joined by newlines", err.Error())
			}
		})
	}
}

// TestParseScript checks every field Parse fills in for a valid header.
func TestParseScript(t *testing.T) {
	src := "-- Gcra checks a limit.\n" +
		"--\n" +
		"-- Second paragraph.\n" +
		"--\n" +
		"-- @script gcra\n" +
		"-- @readonly\n" +
		"-- @key state   the TAT key\n" +
		"--   plain comment lines between annotations are not doc\n" +
		"-- @arg limit int     requests per period\n" +
		"-- @arg label  string\n" +
		"-- @arg now int?      µs; Redis TIME when unset\n" +
		"-- @return allowed bool\n" +
		"-- @return retry_after_ms int    ms\n" +
		"--\t@return ratio float\n" + // a tab after -- works too
		"local x = 1 -- @todo is not an annotation, and neither is -- @script here\n" +
		"-- @see is not one either\n" +
		"return {x}\n"
	s, err := gen.Parse("scripts/gcra.lua", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if s.Path != "scripts/gcra.lua" || s.Name != "gcra" || s.GoName != "GCRA" || s.NameLine != 5 || s.NameCol != 12 {
		t.Errorf("Path, Name, GoName, NameLine, NameCol = %q %q %q %d %d", s.Path, s.Name, s.GoName, s.NameLine, s.NameCol)
	}
	if want := "Gcra checks a limit.\n\nSecond paragraph."; s.Doc != want {
		t.Errorf("Doc = %q, want %q", s.Doc, want)
	}
	if !s.ReadOnly {
		t.Error("ReadOnly = false")
	}
	if string(s.Source) != src {
		t.Error("Source is not the input")
	}
	if len(s.Chunk) != 2 {
		t.Errorf("Chunk has %d statements, want 2", len(s.Chunk))
	}
	wantKeys := []gen.Field{{Name: "state", GoName: "State", Doc: "the TAT key", Type: gen.String, Line: 7, Col: 9}}
	wantArgs := []gen.Field{
		{Name: "limit", GoName: "Limit", Doc: "requests per period", Type: gen.Int, Line: 9, Col: 9},
		{Name: "label", GoName: "Label", Type: gen.String, Line: 10, Col: 9},
		{Name: "now", GoName: "Now", Doc: "µs; Redis TIME when unset", Type: gen.Int, Optional: true, Line: 11, Col: 9},
	}
	wantReturns := []gen.Field{
		{Name: "allowed", GoName: "Allowed", Type: gen.Bool, Line: 12, Col: 12},
		{Name: "retry_after_ms", GoName: "RetryAfterMs", Doc: "ms", Type: gen.Int, Line: 13, Col: 12},
		{Name: "ratio", GoName: "Ratio", Type: gen.Float, Line: 14, Col: 12},
	}
	for _, c := range []struct {
		what      string
		got, want []gen.Field
	}{{"Keys", s.Keys, wantKeys}, {"Args", s.Args, wantArgs}, {"Returns", s.Returns, wantReturns}} {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", c.what, c.got, c.want)
		}
	}
}

// TestParseVariadic checks the fields of a variadic key and of a list
// argument that follows an optional one.
func TestParseVariadic(t *testing.T) {
	src := "-- @script multi\n" +
		"-- @key lock\n" +
		"-- @key states...     one per limit\n" +
		"-- @arg cost int\n" +
		"-- @arg now int?\n" +
		"-- @arg limits int... limit, period and burst of each limit; ... is fine here\n" +
		"return 1\n"
	s, err := gen.Parse("t.lua", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	wantKeys := []gen.Field{
		{Name: "lock", GoName: "Lock", Type: gen.String, Line: 2, Col: 9},
		{Name: "states", GoName: "States", Doc: "one per limit", Type: gen.String, Variadic: true, Line: 3, Col: 9},
	}
	wantArgs := []gen.Field{
		{Name: "cost", GoName: "Cost", Type: gen.Int, Line: 4, Col: 9},
		{Name: "now", GoName: "Now", Type: gen.Int, Optional: true, Line: 5, Col: 9},
		{Name: "limits", GoName: "Limits", Doc: "limit, period and burst of each limit; ... is fine here", Type: gen.Int, Variadic: true, Line: 6, Col: 9},
	}
	if !reflect.DeepEqual(s.Keys, wantKeys) {
		t.Errorf("Keys:\n got %+v\nwant %+v", s.Keys, wantKeys)
	}
	if !reflect.DeepEqual(s.Args, wantArgs) {
		t.Errorf("Args:\n got %+v\nwant %+v", s.Args, wantArgs)
	}

	// Each type can be a list, with or without other arguments before it.
	for typ, want := range map[string]gen.Type{"int": gen.Int, "float": gen.Float, "string": gen.String, "bool": gen.Bool} {
		s, err := gen.Parse("t.lua", []byte("-- @script s\n-- @key only...\n-- @arg xs "+typ+"...\nreturn 1\n"))
		if err != nil {
			t.Fatalf("%s...: %v", typ, err)
		}
		if len(s.Keys) != 1 || !s.Keys[0].Variadic || len(s.Args) != 1 || !s.Args[0].Variadic || s.Args[0].Type != want || s.Args[0].Optional {
			t.Errorf("%s...: Keys %+v, Args %+v", typ, s.Keys, s.Args)
		}
	}
}

// TestParseSameNameInTwoSections shows that sections have their own names:
// a key and an argument may share one (they become fields of different
// structs).
func TestParseSameNameInTwoSections(t *testing.T) {
	s, err := gen.Parse("t.lua", []byte("-- @script s\n-- @key limit\n-- @arg limit int\n-- @return limit int\nreturn {1}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Keys) != 1 || len(s.Args) != 1 || len(s.Returns) != 1 {
		t.Errorf("got %d keys, %d args, %d returns; want one of each", len(s.Keys), len(s.Args), len(s.Returns))
	}
}

func TestGoName(t *testing.T) {
	for _, tt := range []struct{ name, goName, problem string }{
		{"gcra", "GCRA", ""},
		{"gcra_multi", "GCRAMulti", ""},
		{"fixed_window", "FixedWindow", ""},
		{"retry_after_ms", "RetryAfterMs", ""},
		{"id", "ID", ""},
		{"user_id", "UserID", ""},
		{"ids", "IDs", ""},
		{"ttl_ms", "TTLMs", ""},
		{"url", "URL", ""},
		{"http_status", "HTTPStatus", ""},
		{"https", "HTTPS", ""},
		{"json_doc", "JSONDoc", ""},
		{"utf8", "UTF8", ""},
		{"db", "DB", ""},
		{"idle", "Idle", ""}, // a word starting with an initialism is not one
		{"s", "S", ""},       // nor is the plural of nothing
		{"ok", "Ok", ""},     // OK is not an initialism of the list
		{"apis", "APIs", ""},
		{"a1_b2", "A1B2", ""},
		{"v_2", "V2", ""},
		{"", "", "empty name"},
		{"Gcra", "", `invalid name "Gcra": use lower snake case, [a-z][a-z0-9]* joined by single underscores`},
		{"9a", "", `invalid name "9a": must start with a lower-case letter`},
		{"a__b", "", `invalid name "a__b": underscores must separate words (no leading, trailing or double underscores)`},
		{"map", "", `name "map" is a Go keyword; choose another`},
	} {
		goName, problem := gen.GoName(tt.name)
		if goName != tt.goName || problem != tt.problem {
			t.Errorf("GoName(%q) = %q, %q; want %q, %q", tt.name, goName, problem, tt.goName, tt.problem)
		}
	}
}

func TestTypeString(t *testing.T) {
	for typ, want := range map[gen.Type]string{gen.Int: "int", gen.Float: "float", gen.String: "string", gen.Bool: "bool", gen.Type(0): "Type(0)"} {
		if got := typ.String(); got != want {
			t.Errorf("Type(%d).String() = %q, want %q", int(typ), got, want)
		}
	}
}

// TestGenerateErrors covers the errors of Generate that are not about one
// script: the package name and the set of files.
func TestGenerateErrors(t *testing.T) {
	ok := gen.File{Path: "a.lua", Src: []byte("-- @script a\nreturn 1\n")}
	for _, tt := range []struct {
		name  string
		pkg   string
		files []gen.File
		want  string
	}{
		{"empty package name", "", []gen.File{ok}, "gen: invalid Go package name \"\""},
		{"package name with a dash", "my-scripts", []gen.File{ok}, `gen: invalid Go package name "my-scripts"`},
		{"package name starting with a digit", "1scripts", []gen.File{ok}, `gen: invalid Go package name "1scripts"`},
		{"package name is a keyword", "func", []gen.File{ok}, `gen: invalid Go package name "func"`},
		{"blank package name", "_", []gen.File{ok}, `gen: invalid Go package name "_"`},
		{"same path twice", "scripts", []gen.File{ok, ok}, "gen: a.lua given twice"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out, err := gen.Generate(tt.pkg, tt.files)
			if err == nil || err.Error() != tt.want {
				t.Fatalf("Generate = %d files, %v; want error %q", len(out), err, tt.want)
			}
			var list gen.ErrorList
			if errors.As(err, &list) {
				t.Errorf("a package or file-set error is an ErrorList: %v", err)
			}
		})
	}
}

// TestGenerateErrorOrder shows that the errors of several files come in
// path, line and column order whatever the order of the inputs, and that a
// collision is reported together with the other files' errors.
func TestGenerateErrorOrder(t *testing.T) {
	files := []gen.File{
		{Path: "c.lua", Src: []byte("-- @script a\n-- @arg n int?\n-- @arg m int\nreturn 1\n")},
		{Path: "b.lua", Src: []byte("-- @script b\nreturn (\n")},
		{Path: "a.lua", Src: []byte("-- @script a\n-- @key K\n-- @arg n number\n")},
		{Path: "d.lua", Src: []byte("-- @script d\n-- @return r int\nreturn {1}\n")},
		{Path: "e.lua", Src: []byte("-- @script d\nreturn {1}\n")},
	}
	want := strings.Join([]string{
		`a.lua:2:9: invalid name "K": use lower snake case, [a-z][a-z0-9]* joined by single underscores`,
		`a.lua:3:11: unknown type "number"; want int, float, string or bool`,
		`b.lua:3:1: Lua syntax error: syntax error near "("`,
		`c.lua:3:9: required argument "m" after an optional one; optional arguments come last`,
		`e.lua:1:12: script "d" generates D, which script "d" (d.lua) also generates; rename one`,
	}, "\n")
	for i := 0; i < len(files); i++ {
		rotated := append(append([]gen.File(nil), files[i:]...), files[:i]...)
		_, err := gen.Generate("scripts", rotated)
		if err == nil || err.Error() != want {
			t.Fatalf("inputs rotated by %d: errors\n%v\nwant\n%s", i, err, want)
		}
	}
}

// TestGenerateNothing shows that no input gives no output and no error.
func TestGenerateNothing(t *testing.T) {
	out, err := gen.Generate("scripts", nil)
	if err != nil || len(out) != 0 {
		t.Fatalf("Generate(nil) = %v, %v; want an empty map", out, err)
	}
}
