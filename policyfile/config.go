package policyfile

import (
	"errors"
	"fmt"
	"time"

	"github.com/sluice-go/sluice"
)

// Config is one policy file as plain Go values: what Parse reads and
// Marshal writes. The adapters turn it into their own configuration
// (httplimit.FromFile, grpclimit.FromFile).
//
// File, Pos and every Pos field are derived: Parse sets them to where each
// thing was read, Marshal ignores them, and they take no part in what the
// file means. Version is derived when the file has none (see Version).
type Config struct {
	// Version names this version of the file in reload logs and metrics.
	// When the file sets none, Parse sets it to "sha256:" and the first 16
	// hex digits of the SHA-256 of the file's bytes, so any change gives a
	// new version: the version reload.Watch reports for the same file.
	Version string
	// Shadow puts every policy in shadow mode: decided, counted, reported,
	// never denied.
	Shadow bool
	// Headers chooses the rate-limit headers: "draft" (the default when
	// empty), "legacy", "both" or "none". gRPC knows "draft" and "none".
	Headers string
	// DegradedHeader names the header (gRPC: the metadata key) set to "?1"
	// on responses decided by the failure policy. Empty: none.
	DegradedHeader string
	// ErrorDomain is the ErrorInfo domain of gRPC refusals (gRPC only).
	ErrorDomain string
	// NoDefaultExempt limits the gRPC health and reflection services too
	// (gRPC only).
	NoDefaultExempt bool
	// Exempt lists what no policy applies to: HTTP routes ("GET /healthz",
	// "/healthz") or gRPC methods ("/pkg.Service/Method", "/pkg.Service/*").
	Exempt []string
	// Identities are named identities policies refer to by name.
	Identities map[string]Identity
	// Policies apply to every request that is not exempt.
	Policies []Policy
	// Routes adds policies per HTTP route template, as httplimit.Config's
	// Routes (HTTP only).
	Routes map[string][]Policy
	// Methods adds policies per gRPC method or service, as
	// grpclimit.Config's Methods (gRPC only).
	Methods map[string][]Policy
	// Tiers chooses a tier per request and adds its policies.
	Tiers *Tiers
	// Limiter configures the Limiter of programs that build it from the
	// file (LimiterOptions). A reload cannot change a running Limiter: a
	// new Limiter section takes effect at the next start.
	Limiter *Limiter

	// File is the name given to Parse (derived).
	File string
	// Pos maps the path of a field to where it was read (derived): the
	// top-level fields by name ("routes", "headers"), the keys of Routes
	// and Methods as routes["KEY"] and methods["KEY"], each entry of
	// Exempt as exempt[I], and tiers.header, tiers.metadata, tiers.claim,
	// tiers.key, tiers.table and tiers.default.
	Pos map[string]Pos
}

// Pos is a position in a policy file (derived: see Config).
type Pos struct {
	File      string
	Line, Col int // 1-based
}

func (p Pos) String() string { return fmt.Sprintf("%s:%d:%d", p.File, p.Line, p.Col) }

// Errorf returns an error at p.
func (p Pos) Errorf(format string, args ...any) Error {
	return Error{File: p.File, Line: p.Line, Col: p.Col, Msg: fmt.Sprintf(format, args...)}
}

// Where returns the position of the field at path (see Config.Pos), or
// the file's start when it is not known.
func (c *Config) Where(path string) Pos {
	if p, ok := c.Pos[path]; ok {
		return p
	}
	return Pos{File: c.File, Line: 1, Col: 1}
}

// Policy is one quota: the file's form of httplimit.Policy and
// grpclimit.Policy.
type Policy struct {
	// Name identifies the policy in headers, denials, logs and metrics: 1
	// to 64 printable ASCII characters, unique in the file.
	Name string
	// Limit is the quota.
	Limit Limit
	// Key names the identity the policy counts (required).
	Key Identity
	// Cost weighs a request; nil: 1 per request.
	Cost *Cost
	// Shadow decides and reports, never denies.
	Shadow bool
	// PerMessage charges a gRPC stream per message received (gRPC only).
	PerMessage bool
	// Pos is where the policy was read (derived).
	Pos Pos
}

// The algorithms a Limit names, as sluice.Algorithm spells them.
const (
	GCRA          = string(sluice.AlgGCRA)
	TokenBucket   = string(sluice.AlgTokenBucket)
	FixedWindow   = string(sluice.AlgFixedWindow)
	SlidingWindow = string(sluice.AlgSlidingWindow)
	SlidingLog    = string(sluice.AlgSlidingLog)
	Concurrency   = string(sluice.AlgConcurrency)
)

// Algorithms lists the algorithms a Limit may name.
var Algorithms = []string{GCRA, TokenBucket, FixedWindow, SlidingWindow, SlidingLog, Concurrency}

// Limit is a policy's quota, built by the sluice constructor of its
// algorithm (SluiceLimit).
type Limit struct {
	// Algorithm is one of Algorithms.
	Algorithm string
	// Rate is the requests (cost units) per Period; for concurrency, the
	// most requests in flight.
	Rate int64
	// Period is the window or refill period (every algorithm but
	// concurrency).
	Period time.Duration
	// Burst is the capacity of gcra and token_bucket. Parse sets it to
	// Rate when the file leaves it out.
	Burst int64
	// Lease is how long a concurrency slot stays taken if it is never
	// released (concurrency only).
	Lease time.Duration
	// Name is the limit's name, which its state in Redis is kept under.
	// Empty: the policy's name. Two policies with the same limit and key
	// share one quota.
	Name string
	// Pos is where the limit was read (derived).
	Pos Pos
}

// Build returns the sluice.Limit l describes, named l.Name or, when that
// is empty, name.
func (l Limit) Build(name string) (sluice.Limit, error) {
	var lim sluice.Limit
	var err error
	switch l.Algorithm {
	case GCRA:
		lim, err = sluice.GCRA(l.Rate, l.Period, l.Burst)
	case TokenBucket:
		lim, err = sluice.TokenBucket(l.Rate, l.Period, l.Burst)
	case FixedWindow:
		lim, err = sluice.FixedWindow(l.Rate, l.Period)
	case SlidingWindow:
		lim, err = sluice.SlidingWindow(l.Rate, l.Period)
	case SlidingLog:
		lim, err = sluice.SlidingLog(l.Rate, l.Period)
	case Concurrency:
		lim, err = sluice.Concurrency(l.Rate, l.Lease)
	default:
		return sluice.Limit{}, fmt.Errorf("%w: unknown algorithm %q", sluice.ErrInvalidLimit, l.Algorithm)
	}
	if err != nil {
		return sluice.Limit{}, err
	}
	if l.Name != "" {
		name = l.Name
	}
	lim = lim.Named(name)
	return lim, lim.Validate()
}

// SluiceLimit returns the sluice.Limit of p: its Limit named Limit.Name,
// or p.Name when that is empty.
func (p *Policy) SluiceLimit() (sluice.Limit, error) { return p.Limit.Build(p.Name) }

// Cost weighs each request: a constant, or a number the request carries
// in a header (HTTP) or metadata key (gRPC).
type Cost struct {
	// Value is the constant cost, when Header and Metadata are empty.
	Value int64
	// Header names the HTTP header holding the cost (HTTP only).
	Header string
	// Metadata names the gRPC metadata key holding the cost (gRPC only).
	Metadata string
	// Default is the cost of a request whose header or metadata is
	// missing, not a decimal integer, or below 1 (Parse sets 1 when the
	// file leaves it out). Clients choose the value: a request can never
	// lower its own cost below 1 unless Default is 0.
	Default int64
	// Max caps the cost read from a request (0: no cap but
	// sluice.MaxCost).
	Max int64
	// Pos is where the cost was read (derived).
	Pos Pos
}

// FromRequest is the cost of a request whose header or metadata value is
// v (ok = false: the request has none). It is what the adapters charge.
func (c *Cost) FromRequest(v string, ok bool) int64 {
	if c.Header == "" && c.Metadata == "" {
		return c.Value
	}
	if !ok {
		return c.Default
	}
	n, err := parseCost(v)
	if err != nil || n < 1 {
		return c.Default
	}
	if c.Max > 0 && n > c.Max {
		return c.Max
	}
	return min(n, sluice.MaxCost)
}

// parseCost reads a request's cost: decimal digits, optionally surrounded
// by spaces; anything else is an error.
func parseCost(v string) (int64, error) {
	var n int64
	i, j := 0, len(v)
	for i < j && (v[i] == ' ' || v[i] == '\t') {
		i++
	}
	for j > i && (v[j-1] == ' ' || v[j-1] == '\t') {
		j--
	}
	if i == j || j-i > 18 {
		return 0, errBadCost
	}
	for ; i < j; i++ {
		c := v[i]
		if c < '0' || c > '9' {
			return 0, errBadCost
		}
		n = n*10 + int64(c-'0')
	}
	return n, nil
}

var errBadCost = errors.New("policyfile: cost is not a decimal integer of at most 18 digits")

// IdentityKind says what an Identity keys requests by.
type IdentityKind string

// The identity kinds. Each names the Go KeyFunc whose keys it produces,
// byte for byte (docs/policies.md).
const (
	// KindRef refers to a named identity of Config.Identities.
	KindRef IdentityKind = "ref"
	// KindIP is the client address (httplimit.IP, grpclimit.IP).
	KindIP IdentityKind = "ip"
	// KindAPIKey is an API key in a header or metadata key, hashed
	// (httplimit.APIKey, grpclimit.APIKey).
	KindAPIKey IdentityKind = "api_key"
	// KindSubject is the verified subject in the request's context
	// (httplimit.Subject, grpclimit.Subject).
	KindSubject IdentityKind = "subject"
	// KindHeader is the value of an HTTP header (httplimit.Header; HTTP
	// only).
	KindHeader IdentityKind = "header"
	// KindRoute is the gRPC method called (grpclimit.Method), or, for a
	// policy under Routes, that route.
	KindRoute IdentityKind = "route"
	// KindMetadata is the value of a gRPC metadata key
	// (grpclimit.Metadata; gRPC only).
	KindMetadata IdentityKind = "metadata"
	// KindConstant is one quota for everyone (httplimit.Constant,
	// grpclimit.Constant).
	KindConstant IdentityKind = "constant"
	// KindJoin keys by every part at once (Join).
	KindJoin IdentityKind = "join"
	// KindFirstOf keys by the first part that answers (FirstOf).
	KindFirstOf IdentityKind = "first_of"
)

// Identity names what a policy counts requests against.
type Identity struct {
	// Kind says which of the other fields apply.
	Kind IdentityKind
	// Ref is the name of the identity referred to (KindRef).
	Ref string
	// IP configures KindIP.
	IP IPOptions
	// Header is the header (gRPC: metadata key) holding the API key
	// (KindAPIKey).
	Header string
	// Name is the header (KindHeader), the metadata key (KindMetadata) or
	// the quota's name (KindConstant).
	Name string
	// Parts are the identities of KindJoin and KindFirstOf.
	Parts []Identity
	// Pos is where the identity was read (derived).
	Pos Pos
}

// IPOptions is the file's form of httplimit.IPOptions and
// grpclimit.IPOptions.
type IPOptions struct {
	// TrustedProxies are the addresses and CIDR prefixes of your proxies.
	TrustedProxies []string
	// Header is the forwarding header read behind a trusted proxy:
	// "x-forwarded-for" or "forwarded"; empty: none.
	Header string
	// IPv4Prefix and IPv6Prefix group clients by prefix (0: 32 and 64).
	IPv4Prefix, IPv6Prefix int
}

// The forwarding headers IPOptions.Header names.
const (
	XForwardedFor = "x-forwarded-for"
	Forwarded     = "forwarded"
)

// Tiers chooses the tier of each request and adds that tier's policies.
// Exactly one of Header, Metadata, Claim and Key says where the tier comes
// from. With a Table, the value found is looked up in it (a map: constant
// time however many entries); without one, the value is the tier's name.
// A request whose tier is not in Policies gets Default's.
type Tiers struct {
	// Header names the HTTP header naming the tier (HTTP only). Clients
	// write headers: let a proxy that authenticated them set it, or map
	// verified values with a Table.
	Header string
	// Metadata names the gRPC metadata key naming the tier (gRPC only).
	Metadata string
	// Claim names the verified claim naming the tier, as stored by
	// httplimit.WithClaims or grpclimit.WithClaims.
	Claim string
	// Key is an identity whose key (as its KeyFunc returns it: "sub:alice",
	// "key:…") is looked up in Table, which it requires.
	Key *Identity
	// Table maps a value (a header, metadata or claim value, or Key's key)
	// to a tier.
	Table map[string]string
	// Default is the tier of requests whose tier is not in Policies
	// (required; must be in Policies).
	Default string
	// Policies are each tier's policies; a tier may have none.
	Policies map[string][]Policy
	// Pos is where the tiers section was read (derived).
	Pos Pos
}

// Lookup is the tier of a request whose value is v (ok = false: it has
// none): through Table when there is one; "" when it names no tier, which
// the adapters take for Default.
func (t *Tiers) Lookup(v string, ok bool) string {
	if !ok {
		return ""
	}
	if t.Table != nil {
		return t.Table[v]
	}
	return v
}

// Limiter configures a Limiter built from the file. Only a program's start
// reads it: a reload cannot change the Limiter already running.
type Limiter struct {
	// Failure is the failure policy: "local" (the default when empty),
	// "open" or "closed".
	Failure string
	// Replicas is the number of replicas sharing the limits (FailLocal's
	// share; 0: sluice's default). Only with failure local.
	Replicas int
	// Timeout bounds how long one decision waits on Redis (0: no bound
	// but the caller's context).
	Timeout time.Duration
	// Pos is where the section was read (derived).
	Pos Pos
}

// Options returns the sluice options l sets (none for a nil l).
func (l *Limiter) Options() []sluice.Option {
	if l == nil {
		return nil
	}
	var opts []sluice.Option
	switch l.Failure {
	case "open":
		opts = append(opts, sluice.WithFailurePolicy(sluice.FailOpen))
	case "closed":
		opts = append(opts, sluice.WithFailurePolicy(sluice.FailClosed))
	case "local":
		opts = append(opts, sluice.WithFailurePolicy(sluice.FailLocal))
	}
	if l.Replicas > 0 {
		opts = append(opts, sluice.WithReplicas(l.Replicas))
	}
	if l.Timeout > 0 {
		opts = append(opts, sluice.WithTimeout(l.Timeout))
	}
	return opts
}

// LimiterOptions returns the sluice options of the file's limiter section,
// for programs that build their Limiter from the file:
// sluice.New(client, append(c.LimiterOptions(), yourOptions...)...).
func (c *Config) LimiterOptions() []sluice.Option { return c.Limiter.Options() }

// AllPolicies calls f with every policy of c and the path naming it in
// errors (policies[0], routes["POST /x"][1], tiers.policies["pro"][0]), in
// a stable order.
func (c *Config) AllPolicies(f func(path string, p *Policy)) {
	for i := range c.Policies {
		f(fmt.Sprintf("policies[%d]", i), &c.Policies[i])
	}
	for _, k := range sortedKeys(c.Routes) {
		for i := range c.Routes[k] {
			f(fmt.Sprintf("routes[%q][%d]", k, i), &c.Routes[k][i])
		}
	}
	for _, k := range sortedKeys(c.Methods) {
		for i := range c.Methods[k] {
			f(fmt.Sprintf("methods[%q][%d]", k, i), &c.Methods[k][i])
		}
	}
	if c.Tiers != nil {
		for _, k := range sortedKeys(c.Tiers.Policies) {
			for i := range c.Tiers.Policies[k] {
				f(fmt.Sprintf("tiers.policies[%q][%d]", k, i), &c.Tiers.Policies[k][i])
			}
		}
	}
}
