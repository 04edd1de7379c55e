package policyfile

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// The fields of each object of the file, as the parser knows them (the
// schema test checks schema.json against these lists).
var (
	configFields   = []string{"version", "shadow", "headers", "degraded_header", "error_domain", "no_default_exempt", "exempt", "limiter", "identities", "policies", "routes", "methods", "tiers"}
	policyFields   = []string{"name", "limit", "key", "cost", "shadow", "per_message"}
	limitFields    = []string{"algorithm", "rate", "period", "burst", "lease", "name"}
	costFields     = []string{"header", "metadata", "default", "max"}
	identityKinds  = []string{"ip", "api_key", "subject", "header", "route", "metadata", "constant", "join", "first_of"}
	ipFields       = []string{"trusted_proxies", "header", "ipv4_prefix", "ipv6_prefix"}
	apiKeyFields   = []string{"header"}
	nameFields     = []string{"name"} // header, metadata and constant identities
	noFields       = []string{}       // subject and route identities
	tiersFields    = []string{"header", "metadata", "claim", "key", "table", "default", "policies"}
	limiterFields  = []string{"failure", "replicas", "timeout"}
	headerModes    = []string{"draft", "legacy", "both", "none"}
	failureModes   = []string{"local", "open", "closed"}
	proxyHeaders   = []string{XForwardedFor, Forwarded}
	paramlessKinds = []string{"ip", "subject", "route"} // usable as a bare word
)

// kindExamples show how to write the kinds that need parameters.
var kindExamples = map[string]string{
	"api_key":  "{api_key: {header: X-API-Key}}",
	"header":   "{header: {name: X-Tenant}}",
	"metadata": "{metadata: {name: x-tenant}}",
	"constant": "{constant: {name: global}}",
	"join":     "{join: [subject, ip]}",
	"first_of": "{first_of: [subject, ip]}",
}

// maxDepth bounds how deep join and first_of nest.
const maxDepth = 32

// Load reads and parses the policy file at path.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("policyfile: %w", err)
	}
	return Parse(path, data)
}

// Parse reads a policy file (YAML, or JSON, which is YAML) named filename
// in errors. On failure the error is an Errors holding every problem
// found, each at its file:line:col.
func Parse(filename string, data []byte) (*Config, error) {
	d := &decoder{file: filename, names: map[string]*yaml.Node{}}
	c := &Config{File: filename, Pos: map[string]Pos{}}
	d.c = c
	if root := d.document(data); root != nil {
		d.config(root)
	}
	if err := d.errs.Err(); err != nil {
		return nil, err
	}
	if c.Version == "" {
		sum := sha256.Sum256(data)
		c.Version = "sha256:" + hex.EncodeToString(sum[:8])
	}
	return c, nil
}

// decoder reads one file's nodes into a Config, collecting every problem.
type decoder struct {
	file   string
	c      *Config
	errs   Errors
	visits int                   // nodes visited, aliases followed
	budget int                   // the most visits allowed (see document)
	over   bool                  // budget spent: stop walking
	names  map[string]*yaml.Node // policy names seen, where first
	tables []tableEntry          // tier table values, checked once the tiers are known
	refs   []*Identity           // every KindRef, checked once the identities are known
}

type tableEntry struct {
	tier string
	node *yaml.Node
}

func (d *decoder) at(n *yaml.Node) Pos {
	return Pos{File: d.file, Line: max(n.Line, 1), Col: max(n.Column, 1)}
}

func (d *decoder) errorf(n *yaml.Node, path, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if path != "" {
		msg = path + ": " + msg
	}
	d.errs = append(d.errs, d.at(n).Errorf("%s", msg))
}

// deref follows aliases and counts the visit.
func (d *decoder) deref(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 64; i++ {
		n = n.Alias
	}
	if n == nil || n.Kind == yaml.AliasNode {
		n = &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null"}
	}
	d.visits++
	if d.visits > d.budget && !d.over {
		d.over = true
		d.errorf(n, "", "the file expands to more than %d nodes once its aliases are followed", d.budget)
	}
	return n
}

var yamlLine = regexp.MustCompile(`^(?:yaml: )?line (\d+): `)

// document parses data into its root node, or reports why it cannot.
func (d *decoder) document(data []byte) *yaml.Node {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	err := dec.Decode(&doc)
	if err != nil && !errors.Is(err, io.EOF) {
		d.syntax(data, err)
		return nil
	}
	if err != nil || doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 || isNull(doc.Content[0]) {
		d.errs = append(d.errs, Error{File: d.file, Line: 1, Col: 1, Msg: "empty file: a policy file needs at least one policy"})
		return nil
	}
	// Aliases may repeat what an anchor holds, but a few aliases of
	// aliases must not make Parse walk billions of nodes: the walk may visit
	// four times the nodes the file holds.
	d.budget = 4*countNodes(&doc) + 10_000
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case err == nil:
		d.errorf(&next, "", "a policy file is one YAML document; a second one starts here")
	case !errors.Is(err, io.EOF):
		d.syntax(data, err)
	}
	return doc.Content[0]
}

// countNodes counts the nodes of a tree, aliases not followed.
func countNodes(n *yaml.Node) int {
	count, stack := 0, []*yaml.Node{n}
	for len(stack) > 0 {
		n, stack = stack[len(stack)-1], stack[:len(stack)-1]
		count++
		stack = append(stack, n.Content...)
	}
	return count
}

// syntax reports a YAML syntax error: at the line the parser names, or,
// for JSON input, at the line and column encoding/json finds.
func (d *decoder) syntax(data []byte, err error) {
	line, col, msg := 1, 1, strings.TrimPrefix(err.Error(), "yaml: ")
	if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = err.Error()[len(m[0]):]
		// yaml.v3 numbers the lines of its parser's errors from 0 (those
		// of its scanner from 1); its parser's problems are these.
		if strings.HasPrefix(msg, "did not find expected") || strings.HasPrefix(msg, "found duplicate %") ||
			msg == "found incompatible YAML document" || msg == "found undefined tag handle" {
			line++
		}
	}
	if t := bytes.TrimLeft(data, " \t\r\n\ufeff"); len(t) > 0 && (t[0] == '{' || t[0] == '[') {
		var v any
		var se *json.SyntaxError
		if jerr := json.Unmarshal(data, &v); errors.As(jerr, &se) {
			line, col = lineCol(data, se.Offset)
			msg = "JSON: " + se.Error()
		}
	}
	d.errs = append(d.errs, Error{File: d.file, Line: line, Col: col, Msg: "syntax error: " + msg})
}

// lineCol is the 1-based line and column (in characters) of the byte
// before offset, where encoding/json stopped.
func lineCol(data []byte, offset int64) (int, int) {
	off := min(max(int(offset)-1, 0), len(data))
	line, col := 1, 1
	for _, r := range string(data[:off]) {
		if r == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	return line, col
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" }

// describe names a node's type and value for "want X, got Y".
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		v := n.Value
		if len(v) > 40 {
			v = v[:40] + "…"
		}
		switch n.ShortTag() {
		case "!!null":
			return "null"
		case "!!bool":
			return "boolean " + v
		case "!!int":
			return "integer " + v
		case "!!float":
			return "number " + v
		default:
			return fmt.Sprintf("string %q", v)
		}
	}
	return "nothing"
}

// entry is one key and value of a mapping.
type entry struct {
	name     string
	key, val *yaml.Node
}

// mapping returns the entries of n in file order, merges (<<) applied.
// With known, every other key is an error (with the nearest known name
// when close); without, any key is allowed, and anyScalar allows keys that
// are not strings (tier table keys such as 12345). A duplicate key is an
// error.
func (d *decoder) mapping(n *yaml.Node, path string, known []string, anyScalar bool) ([]entry, bool) {
	n = d.deref(n)
	if n.Kind != yaml.MappingNode {
		d.errorf(n, path, "want a mapping, got %s", describe(n))
		return nil, false
	}
	var out []entry
	seen := map[string]*yaml.Node{}
	d.collect(n, path, known, anyScalar, false, seen, &out, 0)
	return out, true
}

func (d *decoder) collect(n *yaml.Node, path string, known []string, anyScalar, merged bool, seen map[string]*yaml.Node, out *[]entry, depth int) {
	var merges []*yaml.Node
	for i := 0; i+1 < len(n.Content) && !d.over; i += 2 {
		k, v := d.deref(n.Content[i]), n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			merges = append(merges, v)
			continue
		}
		if k.Kind != yaml.ScalarNode || isNull(k) || !anyScalar && k.ShortTag() != "!!str" {
			d.errorf(k, path, "want a string as key, got %s", describe(k))
			continue
		}
		if first, dup := seen[k.Value]; dup {
			if !merged {
				d.errorf(k, path, "duplicate key %q (first at %d:%d)", k.Value, first.Line, first.Column)
			}
			continue
		}
		if known != nil && !slices.Contains(known, k.Value) {
			if s := didYouMean(k.Value, known); s != "" {
				d.errorf(k, path, "unknown field %q%s", k.Value, s)
			} else {
				d.errorf(k, path, "unknown field %q (want one of %s)", k.Value, strings.Join(known, ", "))
			}
			continue
		}
		seen[k.Value] = k
		*out = append(*out, entry{k.Value, k, v})
	}
	for _, m := range merges {
		m = d.deref(m)
		var maps []*yaml.Node
		switch m.Kind {
		case yaml.MappingNode:
			maps = []*yaml.Node{m}
		case yaml.SequenceNode:
			maps = m.Content
		}
		for _, mm := range maps {
			mm = d.deref(mm)
			if mm.Kind != yaml.MappingNode || depth > maxDepth {
				d.errorf(mm, path, "<< merges a mapping or a list of mappings, got %s", describe(mm))
				continue
			}
			d.collect(mm, path, known, anyScalar, true, seen, out, depth+1)
		}
	}
}

// fields is mapping with known fields, by name.
func (d *decoder) fields(n *yaml.Node, path string, known []string) (map[string]entry, bool) {
	es, ok := d.mapping(n, path, known, false)
	if !ok {
		return nil, false
	}
	m := make(map[string]entry, len(es))
	for _, e := range es {
		m[e.name] = e
	}
	return m, true
}

// list returns the items of a sequence.
func (d *decoder) list(n *yaml.Node, path string) ([]*yaml.Node, bool) {
	n = d.deref(n)
	if n.Kind != yaml.SequenceNode {
		d.errorf(n, path, "want a list, got %s", describe(n))
		return nil, false
	}
	return n.Content, true
}

func (d *decoder) str(n *yaml.Node, path string) (string, bool) {
	n = d.deref(n)
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		hint := ""
		if n.Kind == yaml.ScalarNode && !isNull(n) {
			hint = fmt.Sprintf(` (quote it: "%s")`, n.Value)
		}
		d.errorf(n, path, "want a string, got %s%s", describe(n), hint)
		return "", false
	}
	return n.Value, true
}

// nonEmpty is str, refusing "".
func (d *decoder) nonEmpty(n *yaml.Node, path string) (string, bool) {
	s, ok := d.str(n, path)
	if ok && strings.TrimSpace(s) == "" {
		d.errorf(d.deref(n), path, "must not be empty")
		return "", false
	}
	return s, ok
}

// token is a header or metadata name: an RFC 9110 token.
func (d *decoder) token(n *yaml.Node, path string) (string, bool) {
	s, ok := d.nonEmpty(n, path)
	if !ok {
		return "", false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			d.errorf(d.deref(n), path, "%q is not a header or metadata name (letters, digits and !#$%%&'*+-.^_`|~)", s)
			return "", false
		}
	}
	return s, true
}

func (d *decoder) oneOf(n *yaml.Node, path string, want []string) (string, bool) {
	s, ok := d.str(n, path)
	if !ok {
		return "", false
	}
	if l := strings.ToLower(s); slices.Contains(want, l) {
		return l, true
	}
	d.errorf(d.deref(n), path, "%q is not one of %s%s", s, strings.Join(want, ", "), didYouMean(s, want))
	return "", false
}

func (d *decoder) integer(n *yaml.Node, path string, lo, hi int64) (int64, bool) {
	n = d.deref(n)
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" {
		d.errorf(n, path, "want an integer, got %s", describe(n))
		return 0, false
	}
	v, err := strconv.ParseInt(n.Value, 0, 64)
	switch {
	case err != nil || v > hi:
		d.errorf(n, path, "%s is above the maximum %d", n.Value, hi)
		return 0, false
	case v < lo:
		d.errorf(n, path, "%s is below the minimum %d", n.Value, lo)
		return 0, false
	}
	return v, true
}

func (d *decoder) boolean(n *yaml.Node, path string) bool {
	n = d.deref(n)
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!bool" {
		if v, err := strconv.ParseBool(n.Value); err == nil {
			return v
		}
	}
	d.errorf(n, path, "want true or false, got %s", describe(n))
	return false
}

// duration reads Go duration text ("1m", "500ms", "1h30m"), at least lo.
func (d *decoder) duration(n *yaml.Node, path string, lo time.Duration) (time.Duration, bool) {
	n = d.deref(n)
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		d.errorf(n, path, `want a duration such as "1m", "500ms" or "1h30m", got %s`, describe(n))
		return 0, false
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		d.errorf(n, path, `bad duration %q: want a number and a unit (ns, us, ms, s, m, h), such as "1m", "500ms" or "1h30m"`, n.Value)
		return 0, false
	}
	if v < lo {
		d.errorf(n, path, "duration %s is below %v", n.Value, lo)
		return 0, false
	}
	return v, true
}

func join(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}
