package grpclimit

import (
	"context"
	"errors"
	"fmt"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/ratelimit"
	"google.golang.org/grpc"

	"github.com/sluice-go/sluice/adapters/ratepolicy"
)

// middlewareLimiter is a Server as a go-grpc-middleware ratelimit.Limiter.
type middlewareLimiter struct{ s *Server }

var _ ratelimit.Limiter = middlewareLimiter{}

// MiddlewareLimiter adapts s to go-grpc-middleware v2's ratelimit.Limiter,
// for servers already built on its interceptors/ratelimit: Limit decides
// the call's policies (its method from grpc.Method, exemptions, tiers and
// shadow mode as the interceptors do) and sets the rate-limit metadata and
// the pushback trailer. That middleware turns any error into a bare
// ResourceExhausted string, so clients lose the RetryInfo and QuotaFailure
// details; use s's own interceptors to keep them. Concurrency policies
// need a release the ratelimit.Limiter interface cannot make: a Server
// with one is refused, and once MiddlewareLimiter has returned, so is an
// Update to a Config with one.
func (s *Server) MiddlewareLimiter() (ratelimit.Limiter, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.cur.Load().middlewareReady(); err != nil {
		return nil, err
	}
	s.noConc = true
	return middlewareLimiter{s}, nil
}

// middlewareReady reports a concurrency policy in v, which
// MiddlewareLimiter cannot hold.
func (v *state) middlewareReady() error {
	for _, p := range v.eng.All() {
		if p.Conc {
			return fmt.Errorf("%w: grpclimit: MiddlewareLimiter cannot hold concurrency policy %q", ErrConfig, p.Name)
		}
	}
	return nil
}

// Limit decides the call of ctx.
func (m middlewareLimiter) Limit(ctx context.Context) error {
	method, ok := grpc.Method(ctx)
	if !ok {
		return errors.New("grpclimit: no gRPC method in the context")
	}
	v := m.s.cur.Load()
	if v.exempt(ctx, method) {
		return nil
	}
	sc := getScratch(ctx, method, false, nil)
	defer putScratch(sc)
	if err := v.decide(sc, v.applicable(&sc.call), ratepolicy.OpenPolicies); err != nil {
		if md := v.refusedTrailer(&sc.d); md != nil {
			_ = grpc.SetTrailer(ctx, md)
		}
		return err
	}
	if md := v.header(&sc.d, nil); md != nil {
		_ = grpc.SetHeader(ctx, md)
	}
	return nil
}
