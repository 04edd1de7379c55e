package verify

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sluice-go/sluice/gen"
)

// A step file sits beside its script (gcra.lua → gcra.steps.txtar) and
// lists calls of the script at fixed instants with what they must return.
// It is a txtar archive: free text, then one section per step, named by its
// "-- name --" line. In a section, one directive per line:
//
//	at 1.5s                    time of the step: a Go duration after StartTime (2024-01-01T00:00:00Z); never backwards
//	keys {user:1}:gcra         KEYS of the call
//	args 10 1000000 $now       ARGV of the call
//	do SET k v                 a command run before the call (repeatable)
//	reply [1, 9, 0, 100000]    the reply the call must return
//	ttl {user:1}:gcra 100      the PTTL in ms a key must have after the call (-1: no TTL, -2: no key; 100±5: within 5 ms)
//	expect HGET k f => "7"     a command run after the call and the reply it must return
//
// at, keys and args carry over from the previous step when left out; a
// step without reply does not check it. Arguments are separated by spaces;
// quote one with Go syntax ("a b", "" for an empty one). In keys, args and
// commands, $now is replaced by the step time in µs since the Unix epoch,
// $now_ms and $now_s by the same in ms and s. Lines starting with # are
// comments.
//
// Replies are written 42, "bulk", nil, ok:"OK" (status), err:"ERR text"
// (error: matches an error starting with the text), [1, "a"] (array). In
// patterns, _ matches anything, 10..20 an integer in the range, 20000±50
// one within 50 of 20000 (for durations a script reads from the server),
// and json:`{"a":1}` a bulk string holding that JSON value, members in any
// order.

// StepFile is a parsed step file.
type StepFile struct {
	Path  string
	Doc   string // the text before the first step
	Steps []*Step
}

// Step is one call of a script and what it must do.
type Step struct {
	Name    string
	Line    int           // line of the step's header in the step file
	At      time.Duration // time of the step, after StartTime
	Keys    []string      // may hold $now placeholders
	Args    []string      // may hold $now placeholders
	Do      []Command     // commands run before the call
	Reply   *Reply        // expected reply (a pattern); nil: not checked
	TTLs    []TTLCheck
	Expects []Command // commands run after the call, with their expected replies
}

// Command is a command in a step, with the reply it must return when it is
// an expectation.
type Command struct {
	Args  []string
	Reply Reply
	Line  int
}

// TTLCheck is the PTTL a key must have after a step: milliseconds, -1 for
// no TTL, -2 for a missing key; within Tolerance milliseconds.
type TTLCheck struct {
	Key       string
	PTTL      int64
	Tolerance int64 // ms either way; 0: exactly (on a real server, the real time since the step began plus TTLTolerance at least)
	Line      int
}

// String formats the expected PTTL as in step files: 1000, 1000±50.
func (c TTLCheck) String() string {
	if c.Tolerance > 0 {
		return fmt.Sprintf("%d±%d", c.PTTL, c.Tolerance)
	}
	return strconv.FormatInt(c.PTTL, 10)
}

// StepFilePath returns the step file of a script: NAME.steps.txtar beside
// NAME.lua.
func StepFilePath(script string) string {
	return strings.TrimSuffix(script, ".lua") + ".steps.txtar"
}

// ReadStepFile reads and parses a step file.
func ReadStepFile(path string) (*StepFile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("verify: %w", err)
	}
	return ParseStepFile(path, data)
}

// ParseStepFile parses a step file. On failure the error is a
// gen.ErrorList holding every problem, each as path:LINE:COL: message.
func ParseStepFile(path string, data []byte) (*StepFile, error) {
	p := &stepParser{sf: &StepFile{Path: path}, names: map[string]int{}}
	if !utf8.Valid(data) {
		p.add(1, 1, "step file is not valid UTF-8")
		return nil, p.errs
	}
	for i, raw := range strings.Split(string(data), "\n") {
		p.line(i+1, strings.TrimRight(raw, "\r"))
	}
	if p.cur != nil {
		p.sf.Steps = append(p.sf.Steps, p.cur)
	}
	if len(p.sf.Steps) == 0 && len(p.errs) == 0 {
		p.add(1, 1, "no steps: each step starts with a line -- NAME --")
	}
	if len(p.errs) > 0 {
		return nil, p.errs
	}
	p.sf.Doc = strings.TrimSpace(strings.Join(p.doc, "\n"))
	return p.sf, nil
}

// stepParser is what ParseStepFile has read so far.
type stepParser struct {
	sf        *StepFile
	errs      gen.ErrorList
	doc       []string       // the lines before the first step
	cur       *Step          // the step being read
	prev      *Step          // the step before it
	seenReply bool           // cur has a reply line
	names     map[string]int // step name -> line of its header
}

func (p *stepParser) add(line, col int, format string, args ...any) {
	p.errs = append(p.errs, &gen.Error{Path: p.sf.Path, Line: line, Col: col, Msg: fmt.Sprintf(format, args...)})
}

// line reads line lineNo, text, of the file.
func (p *stepParser) line(lineNo int, text string) {
	if name, ok := stepHeader(text); ok {
		p.startStep(lineNo, name)
		return
	}
	if p.cur == nil {
		p.doc = append(p.doc, text)
		return
	}
	trimmed := strings.TrimLeft(text, " \t")
	if trimmed == "" || strings.HasPrefix(trimmed, "#") {
		return
	}
	col := len(text) - len(trimmed) + 1
	directive, rest, _ := strings.Cut(trimmed, " ")
	d := stepDirective{line: lineNo, col: col, rest: strings.TrimSpace(rest),
		restCol: col + len(trimmed) - len(strings.TrimLeft(trimmed[len(directive):], " \t"))}
	switch directive {
	case "at":
		p.at(d)
	case "keys":
		p.words(d, &p.cur.Keys)
	case "args":
		p.words(d, &p.cur.Args)
	case "do":
		p.do(d)
	case "reply":
		p.reply(d)
	case "ttl":
		p.ttl(d)
	case "expect":
		p.expect(d)
	default:
		p.add(lineNo, col, "unknown directive %q; want at, keys, args, do, reply, ttl or expect", directive)
	}
}

// stepDirective is one directive line of a step: its line, the column of
// the directive, and the rest of the line after it, trimmed, with its
// column.
type stepDirective struct {
	line, col int
	rest      string
	restCol   int
}

// startStep ends the step being read and starts step name, whose header is
// on line lineNo; at, keys and args carry over.
func (p *stepParser) startStep(lineNo int, name string) {
	if p.cur != nil {
		p.sf.Steps = append(p.sf.Steps, p.cur)
		p.prev = p.cur
	}
	p.cur = &Step{Name: name, Line: lineNo}
	if p.prev != nil {
		p.cur.At, p.cur.Keys, p.cur.Args = p.prev.At, p.prev.Keys, p.prev.Args
	}
	if first, dup := p.names[name]; dup {
		p.add(lineNo, 4, "step %q already defined on line %d", name, first)
	}
	p.names[name] = lineNo
	p.seenReply = false
}

// at reads "at DURATION".
func (p *stepParser) at(d stepDirective) {
	at, err := parseAt(d.rest)
	if err != nil {
		p.add(d.line, d.restCol, "%v", err)
		return
	}
	if p.prev != nil && at < p.prev.At {
		p.add(d.line, d.restCol, "time goes backwards: %v is before the previous step's %v", at, p.prev.At)
		return
	}
	p.cur.At = at
}

// words reads "keys WORD..." or "args WORD..." into dst.
func (p *stepParser) words(d stepDirective, dst *[]string) {
	words, err := splitWords(d.rest)
	if err != nil {
		p.add(d.line, d.restCol, "%v", err)
		return
	}
	*dst = words
}

// do reads "do CMD ARG...".
func (p *stepParser) do(d stepDirective) {
	words, err := splitWords(d.rest)
	if err != nil || len(words) == 0 {
		p.add(d.line, d.restCol, "do needs a command: do CMD ARG...")
		return
	}
	p.cur.Do = append(p.cur.Do, Command{Args: words, Line: d.line})
}

// reply reads "reply REPLY".
func (p *stepParser) reply(d stepDirective) {
	if p.seenReply {
		p.add(d.line, d.col, "reply given twice in step %q", p.cur.Name)
		return
	}
	p.seenReply = true
	r, err := ParseReply(d.rest)
	if err != nil {
		p.add(d.line, d.restCol, "%v", strings.TrimPrefix(err.Error(), "verify: "))
		return
	}
	p.cur.Reply = &r
}

// ttl reads "ttl KEY MS[±TOLERANCE]".
func (p *stepParser) ttl(d stepDirective) {
	words, err := splitWords(d.rest)
	if err != nil || len(words) != 2 {
		p.add(d.line, d.restCol, "ttl needs a key and milliseconds: ttl KEY MS[±TOLERANCE] (-1: no TTL, -2: no key)")
		return
	}
	tc, ok := parseTTL(words[1])
	if !ok {
		p.add(d.line, d.restCol, "ttl %q: want milliseconds, optionally ±tolerance (1000, 1000±50), -1 (no TTL) or -2 (no key)", words[1])
		return
	}
	tc.Key, tc.Line = words[0], d.line
	p.cur.TTLs = append(p.cur.TTLs, tc)
}

// expect reads "expect CMD ARG... => REPLY".
func (p *stepParser) expect(d stepDirective) {
	cmdText, replyText, found := strings.Cut(d.rest, "=>")
	words, err := splitWords(strings.TrimSpace(cmdText))
	if !found || err != nil || len(words) == 0 {
		p.add(d.line, d.restCol, "expect needs a command and a reply: expect CMD ARG... => REPLY")
		return
	}
	r, err := ParseReply(strings.TrimSpace(replyText))
	if err != nil {
		p.add(d.line, d.restCol, "%v", strings.TrimPrefix(err.Error(), "verify: "))
		return
	}
	p.cur.Expects = append(p.cur.Expects, Command{Args: words, Reply: r, Line: d.line})
}

// parseTTL parses the milliseconds of a ttl directive: MS, MS±D or MS+-D,
// -1 or -2.
func parseTTL(w string) (TTLCheck, bool) {
	var tc TTLCheck
	ms, tol, found := strings.Cut(w, "±")
	if !found {
		ms, tol, found = strings.Cut(w, "+-")
	}
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil || n < -2 {
		return tc, false
	}
	tc.PTTL = n
	if found {
		d, err := strconv.ParseInt(tol, 10, 64)
		if err != nil || d < 0 || n < 0 {
			return tc, false
		}
		tc.Tolerance = d
	}
	return tc, true
}

// stepHeader recognises a txtar file marker "-- NAME --".
func stepHeader(line string) (string, bool) {
	if !strings.HasPrefix(line, "-- ") || !strings.HasSuffix(line, " --") || len(line) < 7 {
		return "", false
	}
	name := strings.TrimSpace(line[3 : len(line)-3])
	return name, name != ""
}

func parseAt(s string) (time.Duration, error) {
	if s == "" {
		return 0, fmt.Errorf("at needs a time: a Go duration after the start, such as 0, 250ms or 1.5s")
	}
	if s == "0" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("at %q: want a Go duration such as 0, 250ms, 1.5s or 100us", s)
	}
	if d < 0 {
		return 0, fmt.Errorf("at %q: the time cannot be negative", s)
	}
	return d, nil
}

// splitWords splits s on spaces; a word in double quotes or backquotes is
// unquoted with Go syntax.
func splitWords(s string) ([]string, error) {
	words := []string{}
	for {
		s = strings.TrimLeft(s, " \t")
		if s == "" {
			return words, nil
		}
		if s[0] == '"' || s[0] == '`' {
			q, err := strconv.QuotedPrefix(s)
			if err != nil {
				return nil, fmt.Errorf("unterminated or malformed quoted argument %s", s)
			}
			w, _ := strconv.Unquote(q)
			words = append(words, w)
			s = s[len(q):]
			continue
		}
		i := strings.IndexAny(s, " \t")
		if i < 0 {
			i = len(s)
		}
		words = append(words, s[:i])
		s = s[i:]
	}
}

// expand replaces $now, $now_ms and $now_s in each word with the time t in
// µs, ms and s since the Unix epoch.
func expand(words []string, t time.Time) []string {
	if words == nil {
		return nil
	}
	r := strings.NewReplacer(
		"$now_ms", strconv.FormatInt(t.UnixMilli(), 10),
		"$now_s", strconv.FormatInt(t.Unix(), 10),
		"$now", strconv.FormatInt(t.UnixMicro(), 10),
	)
	out := make([]string, len(words))
	for i, w := range words {
		out[i] = r.Replace(w)
	}
	return out
}
