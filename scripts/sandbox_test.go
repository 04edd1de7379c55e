package scripts_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-go/sluice/verify"
)

// envBackend runs the tables and property tests on an environment of
// package verify; newSandbox uses it for the gopher-lua sandbox, which
// emulates Redis 7's Lua in process.
type envBackend struct {
	env verify.Env
}

// newSandbox returns a backend on a fresh verify sandbox.
func newSandbox(t testing.TB) backend {
	t.Helper()
	sb, err := verify.NewSandbox()
	if err != nil {
		t.Fatalf("sandbox: %v", err)
	}
	t.Cleanup(func() { sb.Close() })
	return &envBackend{env: sb}
}

func (b *envBackend) Name() string { return b.env.Name() }

func (b *envBackend) SetClock(now int64) {
	// SetTime of the verify environments cannot fail for a virtual clock.
	_ = b.env.SetTime(context.Background(), time.UnixMicro(now))
}

func (b *envBackend) Eval(ctx context.Context, src string, keys, args []string) (evalResult, error) {
	var res evalResult
	start := time.Now()
	r, err := b.env.Eval(ctx, src, keys, args)
	if err != nil {
		return res, err
	}
	res.Reply, res.Err = fromReply(r)
	for _, k := range keys {
		p, err := b.env.Do(ctx, "PTTL", k)
		if err != nil {
			return res, err
		}
		res.PTTL = append(res.PTTL, p.Int)
	}
	if !b.env.VirtualClock() {
		// The wall clock moved from the script to the reads: by at most
		// this (and the millisecond it started in).
		res.Spread = time.Since(start).Milliseconds() + 1
	}
	return res, nil
}

func (b *envBackend) Do(ctx context.Context, args ...string) (any, error) {
	r, err := b.env.Do(ctx, args...)
	if err != nil {
		return nil, err
	}
	return fromReply(r)
}

func (b *envBackend) Writes(context.Context) (int64, bool, error) { return 0, false, nil }

// fromReply converts a verify.Reply to int64, string, nil or []any; an
// error reply becomes the error.
func fromReply(r verify.Reply) (any, error) {
	switch r.Kind {
	case verify.KindNil:
		return nil, nil
	case verify.KindInt:
		return r.Int, nil
	case verify.KindBulk, verify.KindStatus:
		return r.Str, nil
	case verify.KindError:
		return nil, errors.New(r.Str)
	case verify.KindArray:
		out := make([]any, len(r.Elems))
		for i, e := range r.Elems {
			v, err := fromReply(e)
			if err != nil {
				return nil, err
			}
			out[i] = v
		}
		return out, nil
	}
	return nil, fmt.Errorf("unexpected reply %v", r)
}
