package rlsconf

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-go/sluice/policyfile"
)

// The keys envoyproxy/ratelimit knows, by the object they mean something
// in, and sluice's own keys of rate_limit.
var (
	rootKeys       = []string{"domain", "descriptors"}
	descriptorKeys = []string{"key", "value", "rate_limit", "descriptors", "shadow_mode", "quota_mode", "detailed_metric", "value_to_metric", "share_threshold", "metadata"}
	rateLimitKeys  = []string{"unit", "requests_per_unit", "unlimited", "name", "replaces", "algorithm", "burst", "identity"}
	replacesKeys   = []string{"name"}
	extensionKeys  = []string{"algorithm", "burst", "identity"}
	identityKeys   = []string{"header", "metadata"}
)

// envoyKeys are the keys envoyproxy/ratelimit accepts anywhere in a file:
// it checks a key's name, not its place.
var envoyKeys = func() []string {
	var all []string
	for _, ks := range [][]string{rootKeys, descriptorKeys, rateLimitKeys, replacesKeys} {
		for _, k := range ks {
			if !slices.Contains(all, k) && !slices.Contains(extensionKeys, k) {
				all = append(all, k)
			}
		}
	}
	return all
}()

// fileDoc is one file as written.
type fileDoc struct {
	name      string
	domain    string
	domainPos policyfile.Pos
	descs     []*descDoc
}

// descDoc is one descriptor as written.
type descDoc struct {
	pos                                   policyfile.Pos // the descriptor's mapping
	keyPos                                policyfile.Pos // its key (the mapping's place when it has none)
	key, value                            string
	rl                                    *rateLimitDoc
	children                              []*descDoc
	shadow, quota, detailed, toMetric, sh bool
	bad                                   bool // a field could not be read: no more errors about it
}

// rateLimitDoc is one rate_limit as written.
type rateLimitDoc struct {
	pos       policyfile.Pos
	unit      string
	unitPos   policyfile.Pos
	unitSet   bool
	rpu       uint32
	unlimited bool
	name      string
	replaces  []named
	algorithm string
	algPos    policyfile.Pos
	burst     int64
	burstPos  policyfile.Pos
	burstSet  bool
	identity  Identity
	idPos     policyfile.Pos
	idSet     bool
	bad       bool // a field could not be read: no more errors about it
}

type named struct {
	name string
	pos  policyfile.Pos
}

// decoder reads one file, collecting its problems.
type decoder struct {
	file   string
	errs   policyfile.Errors
	warns  policyfile.Errors
	budget int // nodes the walk may still visit (aliases of aliases)
	spent  bool
}

func (d *decoder) pos(n *yaml.Node) policyfile.Pos {
	return policyfile.Pos{File: d.file, Line: n.Line, Col: n.Column}
}

func (d *decoder) errorf(n *yaml.Node, format string, args ...any) {
	d.errs = append(d.errs, policyfile.Error{File: d.file, Line: n.Line, Col: n.Column, Msg: fmt.Sprintf(format, args...)})
}

func (d *decoder) warnf(n *yaml.Node, format string, args ...any) {
	d.warns = append(d.warns, policyfile.Error{File: d.file, Line: n.Line, Col: n.Column, Msg: fmt.Sprintf(format, args...)})
}

// parse reads one file.
func parse(name string, data []byte) (*fileDoc, policyfile.Errors, policyfile.Errors) {
	d := &decoder{file: name}
	doc := &fileDoc{name: name, domainPos: policyfile.Pos{File: name, Line: 1, Col: 1}}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var root yaml.Node
	err := dec.Decode(&root)
	if err != nil && !errors.Is(err, io.EOF) {
		d.syntax(err)
		return doc, d.errs, d.warns
	}
	if err == nil {
		d.budget = 4*countNodes(&root) + 10_000
		var next yaml.Node
		switch err := dec.Decode(&next); {
		case err == nil:
			d.warnf(&next, "a second YAML document starts here: only the first is read (envoyproxy/ratelimit reads only the first too)")
		case !errors.Is(err, io.EOF):
			d.syntax(err)
		}
	}
	var top *yaml.Node
	if err == nil && root.Kind == yaml.DocumentNode && len(root.Content) > 0 {
		top = d.resolve(root.Content[0])
	}
	if top == nil || isNull(top) {
		d.errs = append(d.errs, policyfile.Error{File: name, Line: 1, Col: 1, Msg: "config file cannot have empty domain"})
		return doc, d.errs, d.warns
	}
	if top.Kind != yaml.MappingNode {
		d.errorf(top, "a config file is a mapping with a domain and its descriptors, not %s", kindName(top))
		return doc, d.errs, d.warns
	}
	doc.domainPos = d.pos(top)
	for _, p := range d.pairs(top, rootKeys, "the file") {
		switch p.key {
		case "domain":
			doc.domain, _ = d.str(p.v, "domain")
			doc.domainPos = d.pos(p.v)
		case "descriptors":
			doc.descs = d.descriptors(p.v)
		}
	}
	if doc.domain == "" {
		d.errs = append(d.errs, policyfile.Error{File: name, Line: doc.domainPos.Line, Col: doc.domainPos.Col, Msg: "config file cannot have empty domain"})
	}
	return doc, d.errs, d.warns
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): `)

// syntax reports a YAML syntax error at the line the parser names.
func (d *decoder) syntax(err error) {
	line, msg := 1, strings.TrimPrefix(err.Error(), "yaml: ")
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
	d.errs = append(d.errs, policyfile.Error{File: d.file, Line: max(line, 1), Col: 1, Msg: "error loading config file: " + msg})
}

func countNodes(n *yaml.Node) int {
	count, stack := 0, []*yaml.Node{n}
	for len(stack) > 0 {
		n, stack = stack[len(stack)-1], stack[:len(stack)-1]
		count++
		stack = append(stack, n.Content...)
	}
	return count
}

// resolve follows aliases; nil once the walk has visited more nodes than
// the file can mean (aliases of aliases), which is reported once.
func (d *decoder) resolve(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if d.budget--; d.budget < 0 {
		if !d.spent {
			d.spent = true
			d.errs = append(d.errs, policyfile.Error{File: d.file, Line: 1, Col: 1, Msg: "the file's aliases repeat its nodes too many times"})
		}
		return nil
	}
	return n
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" }

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	switch n.ShortTag() {
	case "!!str":
		return fmt.Sprintf("the string %q", n.Value)
	case "!!null":
		return "null"
	}
	return n.Value
}

type pair struct {
	key  string
	k, v *yaml.Node
}

// pairs returns the entries of mapping n whose keys are known in it (the
// object where names it in messages), following merge keys (<<). A key
// that is not a string, is given twice or is unknown is an error; a key
// envoyproxy/ratelimit knows but that means nothing here is a warning,
// its value checked as envoyproxy/ratelimit checks it.
func (d *decoder) pairs(n *yaml.Node, known []string, where string) []pair {
	var out []pair
	seen := map[string]*yaml.Node{}
	var merged []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := d.resolve(n.Content[i]), n.Content[i+1]
		if k == nil {
			return out
		}
		if k.Kind != yaml.ScalarNode || k.ShortTag() != "!!str" && k.ShortTag() != "!!merge" {
			d.errorf(k, "config error, key is not of type string: %s", kindName(k))
			continue
		}
		if k.ShortTag() == "!!merge" || k.Value == "<<" {
			merged = append(merged, v)
			continue
		}
		if first, dup := seen[k.Value]; dup {
			d.errorf(k, "key %q given twice (first at line %d)", k.Value, first.Line)
			continue
		}
		seen[k.Value] = k
		if p, ok := d.keep(k, v, known, where); ok {
			out = append(out, p)
		}
	}
	// Merged keys come after the mapping's own, which win.
	for _, m := range merged {
		for _, src := range d.mergeSources(m) {
			for i := 0; i+1 < len(src.Content); i += 2 {
				k := d.resolve(src.Content[i])
				if k == nil {
					return out
				}
				if k.Kind != yaml.ScalarNode || k.ShortTag() != "!!str" {
					d.errorf(k, "config error, key is not of type string: %s", kindName(k))
					continue
				}
				if _, dup := seen[k.Value]; dup {
					continue
				}
				seen[k.Value] = k
				if p, ok := d.keep(k, src.Content[i+1], known, where); ok {
					out = append(out, p)
				}
			}
		}
	}
	return out
}

// mergeSources is what a merge key's value merges: a mapping or a list of
// mappings.
func (d *decoder) mergeSources(v *yaml.Node) []*yaml.Node {
	v = d.resolve(v)
	if v == nil {
		return nil
	}
	switch v.Kind {
	case yaml.MappingNode:
		return []*yaml.Node{v}
	case yaml.SequenceNode:
		var out []*yaml.Node
		for _, e := range v.Content {
			if e = d.resolve(e); e != nil && e.Kind == yaml.MappingNode {
				out = append(out, e)
			} else if e != nil {
				d.errorf(e, "a merge key (<<) merges mappings, not %s", kindName(e))
			}
		}
		return out
	}
	d.errorf(v, "a merge key (<<) merges mappings, not %s", kindName(v))
	return nil
}

// keep decides what key k of an object where means.
func (d *decoder) keep(k, v *yaml.Node, known []string, where string) (pair, bool) {
	name := k.Value
	switch {
	case slices.Contains(known, name):
		return pair{name, k, v}, true
	case slices.Contains(extensionKeys, name):
		d.errorf(k, "config error, unknown key '%s' in %s (sluice's %s goes in rate_limit)", name, where, name)
	case slices.Contains(envoyKeys, name):
		if name != "metadata" {
			d.any(v)
		}
		d.warnf(k, "%s means nothing in %s and is ignored (as envoyproxy/ratelimit ignores it)", name, where)
	default:
		suggest := append(slices.Clone(known), envoyKeys...)
		d.errorf(k, "config error, unknown key '%s' in %s%s", name, where, policyfile.DidYouMean(name, suggest))
	}
	return pair{}, false
}

// any checks a value as envoyproxy/ratelimit checks every value: the keys
// of its mappings known, its lists lists of mappings, its leaves strings,
// whole numbers, booleans or null.
func (d *decoder) any(n *yaml.Node) {
	if n = d.resolve(n); n == nil {
		return
	}
	switch n.Kind {
	case yaml.MappingNode:
		for _, p := range d.pairs(n, envoyKeys, "a mapping") {
			if p.key != "metadata" {
				d.any(p.v)
			}
		}
	case yaml.SequenceNode:
		for _, e := range n.Content {
			if e = d.resolve(e); e == nil {
				return
			}
			if e.Kind != yaml.MappingNode {
				d.errorf(e, "config error, yaml file contains list of type other than map: %s", e.Value)
				continue
			}
			d.any(e)
		}
	default:
		d.leaf(n, "")
	}
}

// leaf checks a scalar: a string, a whole number, a boolean or null, as
// envoyproxy/ratelimit takes them; field names it, or "".
func (d *decoder) leaf(n *yaml.Node, field string) bool {
	switch n.ShortTag() {
	case "!!str", "!!int", "!!bool", "!!null":
		return true
	case "!!float":
		d.errorf(n, "config error, %s%s is not a whole number (quote it to mean text)", fieldPrefix(field), n.Value)
	default:
		d.errorf(n, "config error, %s%s (%s) is not a string, a whole number or a boolean (quote it to mean text)", fieldPrefix(field), n.Value, strings.TrimPrefix(n.ShortTag(), "!!"))
	}
	return false
}

func fieldPrefix(field string) string {
	if field == "" {
		return ""
	}
	return field + ": "
}

// str reads a string field: any scalar, as text (envoyproxy/ratelimit reads
// value: 5 as "5"); null is "".
func (d *decoder) str(n *yaml.Node, field string) (string, bool) {
	if n = d.resolve(n); n == nil {
		return "", false
	}
	if n.Kind != yaml.ScalarNode {
		d.any(n)
		d.errorf(n, "%s: want a string, not %s", field, kindName(n))
		return "", false
	}
	if !d.leaf(n, field) {
		return "", false
	}
	if isNull(n) {
		return "", true
	}
	return n.Value, true
}

// yaml11Bools are the booleans of YAML 1.1, which envoyproxy/ratelimit's
// YAML reader (yaml.v2) takes for true and false.
var yaml11Bools = map[string]bool{
	"y": true, "Y": true, "yes": true, "Yes": true, "YES": true, "on": true, "On": true, "ON": true,
	"n": false, "N": false, "no": false, "No": false, "NO": false, "off": false, "Off": false, "OFF": false,
}

// boolean reads a boolean field; null is false.
func (d *decoder) boolean(n *yaml.Node, field string) bool {
	if n = d.resolve(n); n == nil {
		return false
	}
	if n.Kind == yaml.ScalarNode {
		switch n.ShortTag() {
		case "!!bool":
			return strings.EqualFold(n.Value, "true")
		case "!!null":
			return false
		case "!!str":
			if b, ok := yaml11Bools[n.Value]; ok && n.Style == 0 {
				return b
			}
		}
	} else {
		d.any(n)
	}
	d.errorf(n, "%s: want true or false, not %s", field, kindName(n))
	return false
}

// wholeNumber reads a whole number field from lo to hi; null is 0.
func (d *decoder) wholeNumber(n *yaml.Node, field string, lo, hi int64) (int64, bool) {
	if n = d.resolve(n); n == nil {
		return 0, false
	}
	if n.Kind == yaml.ScalarNode {
		switch n.ShortTag() {
		case "!!null":
			return 0, true
		case "!!int":
			v, err := strconv.ParseInt(n.Value, 0, 64)
			if err == nil && v >= lo && v <= hi {
				return v, true
			}
		}
	} else {
		d.any(n)
	}
	d.errorf(n, "%s: want a whole number from %d to %d, not %s", field, lo, hi, kindName(n))
	return 0, false
}

// list returns the mappings of a list field; null is none.
func (d *decoder) list(n *yaml.Node, field string) []*yaml.Node {
	if n = d.resolve(n); n == nil || isNull(n) {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		d.any(n)
		d.errorf(n, "%s: want a list, not %s", field, kindName(n))
		return nil
	}
	var out []*yaml.Node
	for _, e := range n.Content {
		if e = d.resolve(e); e == nil {
			return out
		}
		if e.Kind != yaml.MappingNode {
			d.errorf(e, "config error, yaml file contains list of type other than map: %s", e.Value)
			continue
		}
		out = append(out, e)
	}
	return out
}

// descriptors reads a list of descriptors.
func (d *decoder) descriptors(n *yaml.Node) []*descDoc {
	var out []*descDoc
	for _, m := range d.list(n, "descriptors") {
		dd := &descDoc{pos: d.pos(m), keyPos: d.pos(m)}
		for _, p := range d.pairs(m, descriptorKeys, "a descriptor") {
			var ok bool
			switch p.key {
			case "key":
				dd.key, ok = d.str(p.v, "key")
				dd.keyPos = d.pos(p.k)
				dd.bad = dd.bad || !ok
			case "value":
				dd.value, ok = d.str(p.v, "value")
				dd.bad = dd.bad || !ok
			case "rate_limit":
				dd.rl = d.rateLimit(p.v)
			case "descriptors":
				dd.children = d.descriptors(p.v)
			case "shadow_mode":
				dd.shadow = d.boolean(p.v, p.key)
			case "quota_mode":
				dd.quota = d.boolean(p.v, p.key)
			case "detailed_metric":
				dd.detailed = d.boolean(p.v, p.key)
			case "value_to_metric":
				dd.toMetric = d.boolean(p.v, p.key)
			case "share_threshold":
				dd.sh = d.boolean(p.v, p.key)
			case "metadata":
				// Anything: envoyproxy/ratelimit checks nothing in it.
			}
		}
		out = append(out, dd)
	}
	return out
}

// rateLimit reads a rate_limit; null is none.
func (d *decoder) rateLimit(n *yaml.Node) *rateLimitDoc {
	if n = d.resolve(n); n == nil || isNull(n) {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		d.any(n)
		d.errorf(n, "rate_limit: want a mapping (unit, requests_per_unit, ...), not %s", kindName(n))
		return nil
	}
	rl := &rateLimitDoc{pos: d.pos(n), unitPos: d.pos(n)}
	before := len(d.errs)
	defer func() { rl.bad = len(d.errs) > before }()
	for _, p := range d.pairs(n, rateLimitKeys, "rate_limit") {
		switch p.key {
		case "unit":
			rl.unit, _ = d.str(p.v, "unit")
			rl.unitPos, rl.unitSet = d.pos(p.v), true
		case "requests_per_unit":
			v, _ := d.wholeNumber(p.v, "requests_per_unit", 0, math.MaxUint32)
			rl.rpu = uint32(v)
		case "unlimited":
			rl.unlimited = d.boolean(p.v, "unlimited")
		case "name":
			rl.name, _ = d.str(p.v, "name")
		case "replaces":
			for _, m := range d.list(p.v, "replaces") {
				r := named{pos: d.pos(m)}
				for _, q := range d.pairs(m, replacesKeys, "a replaces entry") {
					r.name, _ = d.str(q.v, "name")
					r.pos = d.pos(q.v)
				}
				rl.replaces = append(rl.replaces, r)
			}
		case "algorithm":
			rl.algorithm, _ = d.str(p.v, "algorithm")
			rl.algPos = d.pos(p.v)
		case "burst":
			rl.burst, _ = d.wholeNumber(p.v, "burst", 1, 1<<40)
			rl.burstPos, rl.burstSet = d.pos(p.v), true
		case "identity":
			rl.identity, rl.idSet = d.identity(p.v), true
			rl.idPos = d.pos(p.v)
		}
	}
	return rl
}

// identity reads sluice's identity key: ip, api_key or subject, or
// {header: NAME} or {metadata: NAME}.
func (d *decoder) identity(n *yaml.Node) Identity {
	if n = d.resolve(n); n == nil {
		return Identity{}
	}
	const want = "want ip, api_key, subject, {header: NAME} or {metadata: NAME}"
	switch n.Kind {
	case yaml.ScalarNode:
		switch n.Value {
		case IdentityIP, IdentityAPIKey, IdentitySubject:
			return Identity{Kind: n.Value}
		case IdentityHeader, IdentityMetadata:
			d.errorf(n, "identity: %s needs a name: {%s: NAME}", n.Value, n.Value)
			return Identity{}
		}
		d.errorf(n, "identity: %s%s", want, policyfile.DidYouMean(n.Value, []string{IdentityIP, IdentityAPIKey, IdentitySubject}))
	case yaml.MappingNode:
		ps := d.pairs(n, identityKeys, "identity")
		if len(ps) != 1 {
			if len(ps) > 1 {
				d.errorf(n, "identity: one of header or metadata, not both")
			} else if len(n.Content) == 0 {
				d.errorf(n, "identity: %s", want)
			}
			return Identity{}
		}
		name, _ := d.str(ps[0].v, ps[0].key)
		if strings.TrimSpace(name) == "" {
			d.errorf(ps[0].v, "identity: %s: want the name of a header or metadata key", ps[0].key)
			return Identity{}
		}
		return Identity{Kind: ps[0].key, Name: strings.ToLower(name)}
	default:
		d.errorf(n, "identity: %s", want)
	}
	return Identity{}
}
