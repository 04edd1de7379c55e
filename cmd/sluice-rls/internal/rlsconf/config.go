package rlsconf

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/policyfile"
)

// Units are the units a rate_limit may name, with their windows (a month
// is 30 days and a year 365, as envoyproxy/ratelimit counts them). The
// names are case-insensitive.
var Units = map[string]time.Duration{
	"second": time.Second,
	"minute": time.Minute,
	"hour":   time.Hour,
	"day":    24 * time.Hour,
	"week":   7 * 24 * time.Hour,
	"month":  30 * 24 * time.Hour,
	"year":   365 * 24 * time.Hour,
}

const unitList = "second, minute, hour, day, week, month or year"

// UnitPeriod is the window of unit (any case), and whether it is one.
func UnitPeriod(unit string) (time.Duration, bool) {
	p, ok := Units[strings.ToLower(unit)]
	return p, ok
}

// Rule is a descriptor's rate_limit.
type Rule struct {
	// Key is where the rule is: its domain and the descriptors leading to
	// it, "domain.key1_value1.key2" (envoyproxy/ratelimit's name for its
	// statistics).
	Key string
	// Pos is where its rate_limit is written.
	Pos policyfile.Pos
	// RequestsPerUnit and Unit (lower case) are the limit as written; 0
	// requests per unit refuses every request that has a cost.
	RequestsPerUnit uint32
	Unit            string
	// Unlimited rules admit everything, unasked.
	Unlimited bool
	// Shadow rules are decided and counted but never refuse (shadow_mode);
	// Quota rules likewise (quota_mode).
	Shadow, Quota bool
	// DetailedMetric keeps the rule's statistics per value.
	DetailedMetric bool
	// Name is rate_limit's name: what replaces name, and the name the
	// response reports.
	Name string
	// Replaces are the names of the rules this one takes the place of when
	// both apply to one request.
	Replaces []string
	// Limit is what sluice counts: the algorithm (fixed_window unless the
	// rule says otherwise), RequestsPerUnit per Unit, the burst. Its Name
	// is the algorithm's, or, with an Identity, the rule's Name. The zero
	// Limit when Unlimited or RequestsPerUnit is 0.
	Limit sluice.Limit
	// Identity, when set, counts the descriptor's value as an application
	// policy counts the same identity.
	Identity Identity
}

// Identity is what a rule counts a descriptor's value as: an httplimit or
// grpclimit identity (ip, api_key, subject, header or metadata, with the
// header's or metadata key's Name). The zero Identity counts the
// descriptor itself.
type Identity struct {
	Kind string
	Name string // lower case, for header and metadata
}

// The kinds of Identity.
const (
	IdentityIP       = "ip"
	IdentityAPIKey   = "api_key"
	IdentitySubject  = "subject"
	IdentityHeader   = "header"
	IdentityMetadata = "metadata"
)

// node is a descriptor of the tree: its children by composite key
// (key_value, or key), the composite keys among them ending in '*' in the
// order written, and its rule.
type node struct {
	pos       policyfile.Pos
	children  map[string]*node
	wildcards []string
	rule      *Rule
	toMetric  bool
	share     bool // share_threshold, on a wildcard
}

// Config is a loaded configuration. It is never modified: a reload makes
// a new one.
type Config struct {
	domains map[string]*node
	// Files are the files read, in the order read.
	Files []string
	// Warnings are what was accepted but means nothing (a key where it is
	// ignored, a second YAML document).
	Warnings policyfile.Errors
}

// File is one configuration file: its name (in errors) and content.
type File struct {
	Name string
	Data []byte
}

// Options configures Build and Load.
type Options struct {
	// MergeDomains lets several files hold one domain, their descriptors
	// merged (envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG); by default a
	// domain in two files is an error.
	MergeDomains bool
}

// IsConfigFile reports whether a directory entry named name is a
// configuration file: it ends in .yaml or .yml and does not start with a
// dot.
func IsConfigFile(name string) bool {
	ext := filepath.Ext(name)
	return !strings.HasPrefix(name, ".") && (ext == ".yaml" || ext == ".yml")
}

// Load reads every configuration file of dir (IsConfigFile, in name
// order; subdirectories are not read) and builds the configuration. A
// directory without one is an error.
func Load(dir string, opts Options) (*Config, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("rlsconf: %w", err)
	}
	var files []File
	for _, e := range entries {
		if !IsConfigFile(e.Name()) {
			continue
		}
		name := filepath.Join(dir, e.Name())
		if st, err := os.Stat(name); err != nil || st.IsDir() {
			continue // a dangling link, a directory named x.yaml
		}
		data, err := os.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("rlsconf: %w", err)
		}
		files = append(files, File{Name: name, Data: data})
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("rlsconf: %s holds no configuration file (*.yaml or *.yml)", dir)
	}
	return Build(files, opts)
}

// Build reads files, in order, into one configuration. On failure the
// error is a policyfile.Errors holding every problem of every file, each
// at its file:line:col.
func Build(files []File, opts Options) (*Config, error) {
	c := &Config{domains: map[string]*node{}}
	b := &builder{c: c, opts: opts, first: map[string]policyfile.Pos{}}
	for _, f := range files {
		doc, errs, warns := parse(f.Name, f.Data)
		c.Files = append(c.Files, f.Name)
		b.errs = append(b.errs, errs...)
		c.Warnings = append(c.Warnings, warns...)
		// A tree with problems is built all the same, for the problems
		// of its other parts; what could not be read is not checked again.
		b.domain(doc)
	}
	if err := b.errs.Err(); err != nil {
		return nil, err
	}
	c.Warnings, _ = c.Warnings.Err().(policyfile.Errors)
	return c, nil
}

type builder struct {
	c     *Config
	opts  Options
	errs  policyfile.Errors
	first map[string]policyfile.Pos // where each domain was first given
}

func (b *builder) errorf(p policyfile.Pos, format string, args ...any) {
	b.errs = append(b.errs, policyfile.Error{File: p.File, Line: p.Line, Col: p.Col, Msg: fmt.Sprintf(format, args...)})
}

func (b *builder) domain(doc *fileDoc) {
	if doc.domain == "" {
		return // reported by parse
	}
	root, ok := b.c.domains[doc.domain]
	if ok && !b.opts.MergeDomains {
		b.errorf(doc.domainPos, "duplicate domain '%s' in config file (first in %s)", doc.domain, b.first[doc.domain])
		return
	}
	if !ok {
		root = &node{pos: doc.domainPos, children: map[string]*node{}}
		b.c.domains[doc.domain] = root
		b.first[doc.domain] = doc.domainPos
	}
	b.load(root, doc.domain+".", doc.descs)
}

// load adds descs under parent, whose key is parentKey (ending in '.').
func (b *builder) load(parent *node, parentKey string, descs []*descDoc) {
	for _, dd := range descs {
		if dd.bad {
			continue
		}
		if dd.key == "" {
			b.errorf(dd.keyPos, "descriptor has empty key")
			continue
		}
		fk := dd.key
		if dd.value != "" {
			fk += "_" + dd.value
		}
		full := parentKey + fk
		if prev, dup := parent.children[fk]; dup {
			b.errorf(dd.keyPos, "duplicate descriptor composite key '%s' (first at %s)", full, prev.pos)
			continue
		}
		n := &node{pos: dd.keyPos, children: map[string]*node{}, toMetric: dd.toMetric}
		if dd.rl != nil {
			n.rule = b.rule(dd, full)
		}
		wild := strings.HasSuffix(fk, "*")
		if dd.sh && !wild {
			b.errorf(dd.keyPos, "share_threshold can only be used with wildcard values (ending with '*'), but found key '%s'", fk)
		}
		n.share = dd.sh && wild
		if wild {
			parent.wildcards = append(parent.wildcards, fk)
		}
		b.load(n, full+".", dd.children)
		parent.children[fk] = n
	}
}

// rule builds the rule of dd, whose key is full.
func (b *builder) rule(dd *descDoc, full string) *Rule {
	rl := dd.rl
	r := &Rule{
		Key: full, Pos: rl.pos, RequestsPerUnit: rl.rpu, Unit: strings.ToLower(rl.unit), Unlimited: rl.unlimited,
		Shadow: dd.shadow, Quota: dd.quota, DetailedMetric: dd.detailed, Name: rl.name, Identity: rl.identity,
	}
	if rl.bad {
		return r // already reported
	}
	period, validUnit := UnitPeriod(rl.unit)
	switch {
	case rl.unlimited && validUnit:
		b.errorf(rl.unitPos, "should not specify rate limit unit when unlimited")
	case !rl.unlimited && !validUnit:
		b.errorf(rl.unitPos, "invalid rate limit unit '%s' (want %s)", rl.unit, unitList)
	}
	for _, rp := range rl.replaces {
		switch {
		case rp.name == "":
			b.errorf(rp.pos, "should not have an empty replaces entry")
		case rp.name == rl.name:
			b.errorf(rp.pos, "replaces should not contain name of same descriptor")
		default:
			r.Replaces = append(r.Replaces, rp.name)
		}
	}
	alg := sluice.AlgFixedWindow
	if rl.algorithm != "" {
		alg = sluice.Algorithm(rl.algorithm)
		if !slices.Contains(algorithms, alg) {
			b.errorf(rl.algPos, "algorithm '%s': want one of %s%s", rl.algorithm, algorithmList(), policyfile.DidYouMean(rl.algorithm, algorithmNames()))
			return r
		}
	}
	if rl.unlimited {
		for _, ext := range []struct {
			set  bool
			name string
			pos  policyfile.Pos
		}{{rl.algorithm != "", "algorithm", rl.algPos}, {rl.burstSet, "burst", rl.burstPos}, {rl.idSet, "identity", rl.idPos}} {
			if ext.set {
				b.errorf(ext.pos, "%s means nothing beside unlimited", ext.name)
			}
		}
		return r
	}
	burst := int64(rl.rpu)
	if rl.burstSet {
		if alg != sluice.AlgGCRA && alg != sluice.AlgTokenBucket {
			b.errorf(rl.burstPos, "burst is for gcra and token_bucket, not %s", alg)
			return r
		}
		burst = rl.burst
	}
	name := string(alg)
	if rl.idSet && rl.identity.Kind != "" {
		if !validLimitName(rl.name) {
			b.errorf(rl.idPos, "identity needs the rule's name to be the name of the application's limit it shares (1 to 64 letters, digits, '.', '_' or '-'), got name '%s'", rl.name)
			return r
		}
		name = rl.name
	}
	if !validUnit || rl.rpu == 0 {
		return r // refuses every request with a cost, unasked
	}
	lim := sluice.Limit{Algorithm: alg, Rate: int64(rl.rpu), Period: period, Name: name}
	if alg == sluice.AlgGCRA || alg == sluice.AlgTokenBucket {
		lim.Burst = burst
	}
	if err := lim.Validate(); err != nil {
		b.errorf(rl.pos, "%v", err)
		return r
	}
	r.Limit = lim
	return r
}

var algorithms = []sluice.Algorithm{sluice.AlgFixedWindow, sluice.AlgGCRA, sluice.AlgTokenBucket, sluice.AlgSlidingWindow, sluice.AlgSlidingLog, sluice.AlgConcurrency}

func algorithmNames() []string {
	out := make([]string, len(algorithms))
	for i, a := range algorithms {
		out[i] = string(a)
	}
	return out
}

func algorithmList() string {
	n := algorithmNames()
	return strings.Join(n[:len(n)-1], ", ") + " or " + n[len(n)-1]
}

// validLimitName is sluice.Limit's rule for names.
func validLimitName(s string) bool {
	return (sluice.Limit{Algorithm: sluice.AlgFixedWindow, Rate: 1, Period: time.Second, Name: s}).Validate() == nil
}

// Domains lists the configured domains, sorted.
func (c *Config) Domains() []string {
	out := make([]string, 0, len(c.domains))
	for d := range c.domains {
		out = append(out, d)
	}
	sort.Strings(out)
	return out
}

// HasDomain reports whether domain is configured.
func (c *Config) HasDomain(domain string) bool { return c.domains[domain] != nil }

// Rules calls f for every rule of domain, in no particular order.
func (c *Config) Rules(domain string, f func(*Rule)) {
	var walk func(n *node)
	walk = func(n *node) {
		if n.rule != nil {
			f(n.rule)
		}
		for _, ch := range n.children {
			walk(ch)
		}
	}
	if root := c.domains[domain]; root != nil {
		walk(root)
	}
}
