package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluice-go/sluice"
)

// ClientConfig configures the client interceptors. The zero value honours
// refusals' RetryInfo once per call and limits nothing itself.
type ClientConfig struct {
	// Retries is how many times a unary call refused with a RetryInfo
	// (codes.ResourceExhausted or codes.Unavailable) is tried again after
	// the delay the server asked for (default 1; negative: never). A call
	// whose deadline would pass before the delay ends, or whose delay is
	// over MaxWait, fails at once with the server's status: the caller
	// learns at once what waiting could not fix.
	Retries int
	// MaxWait is the longest RetryInfo delay waited (default 10 s).
	MaxWait time.Duration

	// Limiter and Limit, when set, rate limit the calls this client makes,
	// sharing the limit with every process on the Limiter's Redis: a GCRA
	// or token-bucket Limit waits (Limiter.Wait) until the call conforms,
	// within its deadline; any other algorithm is asked once
	// (Limiter.Allow). A call
	// the limit refuses fails with codes.ResourceExhausted and a RetryInfo,
	// without reaching the server.
	Limiter *sluice.Limiter
	Limit   sluice.Limit
	// Identity names who the client limit counts (default "grpc-client":
	// every call of every process sharing it). Key, when set, names it per
	// call.
	Identity string
	Key      func(ctx context.Context, fullMethod string) string
}

// Client holds a ClientConfig's interceptors.
type Client struct {
	cfg ClientConfig
}

// NewClient validates cfg.
func NewClient(cfg ClientConfig) (*Client, error) {
	if cfg.Retries == 0 {
		cfg.Retries = 1
	}
	if cfg.MaxWait == 0 {
		cfg.MaxWait = 10 * time.Second
	}
	if cfg.MaxWait < 0 {
		return nil, fmt.Errorf("%w: grpclimit: negative MaxWait %v", ErrConfig, cfg.MaxWait)
	}
	if cfg.Identity == "" {
		cfg.Identity = "grpc-client"
	}
	if cfg.Limiter != nil {
		if err := cfg.Limit.Validate(); err != nil {
			return nil, fmt.Errorf("%w: %w: %w", ErrConfig, errNoLimit, err)
		}
		if cfg.Limit.Algorithm == sluice.AlgConcurrency {
			return nil, fmt.Errorf("%w: grpclimit: a client Limit cannot be a concurrency limit", ErrConfig)
		}
	}
	return &Client{cfg: cfg}, nil
}

// UnaryClientInterceptor limits outgoing unary calls (when a Limiter is
// set) and retries a refused call after its RetryInfo delay when the
// call's deadline allows it.
func (c *Client) UnaryClientInterceptor() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		for attempt := 0; ; attempt++ {
			if err := c.limit(ctx, method); err != nil {
				return err
			}
			err := invoker(ctx, method, req, reply, cc, opts...)
			if err == nil || attempt >= c.cfg.Retries {
				return err
			}
			if !c.wait(ctx, err) {
				return err
			}
		}
	}
}

// StreamClientInterceptor limits the streams this client opens (when a
// Limiter is set). Refusals of a stream arrive with its messages, past
// where an interceptor could retry: read them with RetryDelay.
func (c *Client) StreamClientInterceptor() grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		if err := c.limit(ctx, method); err != nil {
			return nil, err
		}
		return streamer(ctx, desc, cc, method, opts...)
	}
}

// wait sleeps for err's RetryInfo delay and reports true, or reports false
// at once when err is not a refusal with one, the delay is over MaxWait,
// or ctx's deadline would pass first. It reports false if ctx ends while
// it waits.
func (c *Client) wait(ctx context.Context, err error) bool {
	switch status.Code(err) {
	case codes.ResourceExhausted, codes.Unavailable:
	default:
		return false
	}
	delay, ok := RetryDelay(err)
	if !ok || delay > c.cfg.MaxWait {
		return false
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= delay {
		return false
	}
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// limit applies the client's own limit to one call.
func (c *Client) limit(ctx context.Context, method string) error {
	lim := c.cfg.Limiter
	if lim == nil {
		return nil
	}
	id := c.cfg.Identity
	if c.cfg.Key != nil {
		id = c.cfg.Key(ctx, method)
	}
	if a := c.cfg.Limit.Algorithm; a == sluice.AlgGCRA || a == sluice.AlgTokenBucket {
		res, err := lim.Wait(ctx, id, c.cfg.Limit)
		switch {
		case err == nil && res.OK:
			return nil
		case err == nil || errors.Is(err, sluice.ErrNotReserved):
			delay := time.Duration(0)
			if res != nil {
				delay = res.Delay()
			}
			return clientRefusal(c.cfg.Limit, delay)
		case ctx.Err() != nil:
			return status.FromContextError(ctx.Err()).Err()
		default:
			return status.Error(codes.Unavailable, "grpclimit: client rate limit could not be decided")
		}
	}
	res, err := lim.Allow(ctx, id, c.cfg.Limit)
	switch {
	case err != nil && ctx.Err() != nil:
		return status.FromContextError(ctx.Err()).Err()
	case err != nil:
		return status.Error(codes.Unavailable, "grpclimit: client rate limit could not be decided")
	case !res.Allowed:
		return clientRefusal(c.cfg.Limit, res.RetryAfter)
	}
	return nil
}

// clientRefusal is the status of a call the client's own limit refused.
func clientRefusal(lim sluice.Limit, delay time.Duration) error {
	if delay == sluice.RetryNever || delay <= 0 {
		delay = lim.Period
	}
	delay = (delay + time.Millisecond - 1) / time.Millisecond * time.Millisecond
	st, err := status.New(codes.ResourceExhausted, "grpclimit: client rate limit "+lim.Name+" exceeded").WithDetails(
		&errdetails.RetryInfo{RetryDelay: durationpb.New(delay)},
		&errdetails.ErrorInfo{Reason: ReasonRateLimited, Domain: "sluice.client", Metadata: map[string]string{"policies": lim.Name}})
	if err != nil {
		return status.Error(codes.ResourceExhausted, "grpclimit: client rate limit "+lim.Name+" exceeded")
	}
	return st.Err()
}
