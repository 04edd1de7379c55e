package grpclimit

import (
	"context"
	"net"
	"strings"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adapters/ratepolicy"
)

// Call is what policies see of one RPC. It is valid only while the
// KeyFunc, CostFunc or Tier func it was given to runs: do not keep it.
type Call struct {
	ctx    context.Context
	method string
	stream bool
	msg    any
}

// Context is the call's context (the server's: incoming metadata, peer,
// deadline, and what earlier interceptors stored, such as WithSubject).
func (c *Call) Context() context.Context { return c.ctx }

// FullMethod is the method called: "/package.Service/Method".
func (c *Call) FullMethod() string { return c.method }

// Service is the service of the method called: "package.Service".
func (c *Call) Service() string { return service(c.method) }

// IsStream reports a streaming call.
func (c *Call) IsStream() bool { return c.stream }

// Message is the request of a unary call, the message just received for a
// stream's PerMessage policies, and nil at a stream's open.
func (c *Call) Message() any { return c.msg }

// Metadata returns the values of key in the call's incoming metadata
// (keys are lower case in gRPC). Clients write them: never trust them for
// an identity without verifying it.
func (c *Call) Metadata(key string) []string { return metadata.ValueFromIncomingContext(c.ctx, key) }

// Peer is the address of the connection's peer, or nil.
func (c *Call) Peer() net.Addr {
	if p, ok := peer.FromContext(c.ctx); ok {
		return p.Addr
	}
	return nil
}

// service is "pkg.Svc" of "/pkg.Svc/Method".
func service(method string) string {
	s := strings.TrimPrefix(method, "/")
	if i := strings.LastIndexByte(s, '/'); i >= 0 {
		return s[:i]
	}
	return s
}

// A KeyFunc names the identity a call is counted against; ok = false means
// the call has no such identity (a chain moves on; a policy whose KeyFunc
// finds nothing does not apply). Whatever it returns is bounded
// (ratepolicy.MaxKeyLen) before it reaches the Limiter, which escapes or
// hashes it into its Redis key.
type KeyFunc func(c *Call) (key string, ok bool)

// A CostFunc weighs a call, or a stream's message for a PerMessage policy
// (1 when a Policy has none). 0 spends nothing; a negative cost is a
// programming error, answered with codes.Internal.
type CostFunc func(c *Call) int64

// Policy is one quota applied to gRPC calls: the model httplimit.Policy
// is, with gRPC's KeyFunc and CostFunc.
//
// A policy's state in Redis belongs to its Limit (by Limit.Name) and its
// key: two policies with the same Limit and KeyFunc share one quota,
// across HTTP and gRPC too.
type Policy struct {
	// Name identifies the policy in RateLimit metadata, refusals' details,
	// logs and metrics (default Limit.Name): 1 to 64 printable ASCII
	// characters. Clients see it.
	Name string
	// Limit is the quota: a rate limit (any algorithm) or a
	// sluice.Concurrency limit, which holds a slot while the call (or the
	// stream) runs.
	Limit sluice.Limit
	// Key names the identity counted (required).
	Key KeyFunc
	// Cost weighs each call (default 1). Ignored by concurrency policies.
	Cost CostFunc
	// Shadow decides, reports and logs a would-be refusal, never refuses.
	Shadow bool
	// PerMessage charges a stream once per message it receives (RecvMsg)
	// instead of once at its open; a refused message fails RecvMsg with
	// the refusal, which the handler returns. A unary call is one
	// message: it is charged once, like the other policies. Not for
	// concurrency policies.
	PerMessage bool
}

func shared(ps []Policy) []ratepolicy.Policy[*Call] {
	if ps == nil {
		return nil
	}
	out := make([]ratepolicy.Policy[*Call], len(ps))
	for i, p := range ps {
		out[i] = ratepolicy.Policy[*Call]{Name: p.Name, Limit: p.Limit, Key: p.Key, Cost: p.Cost, Shadow: p.Shadow, PerMessage: p.PerMessage}
	}
	return out
}

func sharedMap(m map[string][]Policy) map[string][]ratepolicy.Policy[*Call] {
	if m == nil {
		return nil
	}
	out := make(map[string][]ratepolicy.Policy[*Call], len(m))
	for k, ps := range m {
		out[k] = shared(ps)
	}
	return out
}

// WithSubject returns a context carrying the verified subject of a call.
// Call it from the interceptor that verified the credential, before the
// rate limit's; it is httplimit.WithSubject, so either adapter sees it.
func WithSubject(ctx context.Context, subject string) context.Context {
	return ratepolicy.WithSubject(ctx, subject)
}

// SubjectFrom returns the subject stored by WithSubject.
func SubjectFrom(ctx context.Context) (string, bool) { return ratepolicy.SubjectFrom(ctx) }

// Subject keys a call by the verified subject in its context (see
// WithSubject): "sub:SUBJECT", or "sub#SHA256" for long or unprintable
// subjects, as httplimit.Subject.
func Subject() KeyFunc {
	return func(c *Call) (string, bool) {
		s, ok := SubjectFrom(c.ctx)
		if !ok {
			return "", false
		}
		return ratepolicy.SubjectKey(s)
	}
}

// SubjectFunc keys a call by a subject found by f, which must only return
// verified subjects.
func SubjectFunc(f func(*Call) (string, bool)) KeyFunc {
	return func(c *Call) (string, bool) {
		s, ok := f(c)
		if !ok {
			return "", false
		}
		return ratepolicy.SubjectKey(s)
	}
}

// APIKey keys a call by the API key in the named metadata key (its first
// value), hashed as httplimit.APIKey hashes a header: "key:" and 128 bits
// of its SHA-256. The same key sent over HTTP and over gRPC is one
// identity. A missing or empty value is no identity.
func APIKey(key string) KeyFunc {
	key = strings.ToLower(key)
	return func(c *Call) (string, bool) {
		v := c.Metadata(key)
		if len(v) == 0 {
			return "", false
		}
		return ratepolicy.APIKeyKey(v[0])
	}
}

// Metadata keys a call by the first value of a metadata key (a tenant, a
// region): "md:KEY:VALUE", or "md:KEY#SHA256" for values over 96 bytes,
// not UTF-8 or holding control characters. Clients choose the value: key
// by it only what a client may spend as it likes, or after verifying it.
func Metadata(key string) KeyFunc {
	key = strings.ToLower(key)
	kind := "md:" + key
	return func(c *Call) (string, bool) {
		v := c.Metadata(key)
		if len(v) == 0 || v[0] == "" {
			return "", false
		}
		return ratepolicy.Tagged(kind, v[0]), true
	}
}

// Method keys a call by its full method: one quota per method for all
// clients.
func Method() KeyFunc {
	return func(c *Call) (string, bool) { return ratepolicy.Tagged("method", c.method), true }
}

// Constant keys every call by the same name: one quota shared by all
// clients. It is httplimit.Constant's key.
func Constant(name string) KeyFunc {
	k := ratepolicy.ConstantKey(name)
	return func(*Call) (string, bool) { return k, true }
}

// Join keys a call by several identities at once; it answers only when
// every part answers (length-prefixed, as httplimit.Join).
func Join(parts ...KeyFunc) KeyFunc { return ratepolicy.Join(parts...) }

// FirstOf returns the key of the first KeyFunc that answers.
func FirstOf(chain ...KeyFunc) KeyFunc { return ratepolicy.FirstOf(chain...) }
