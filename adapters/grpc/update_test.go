package grpclimit

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"

	"github.com/sluice-go/sluice"
)

// TestUpdateSwaps checks that calls after Update are decided and answered
// under the new Config: its version, policies and methods.
func TestUpdateSwaps(t *testing.T) {
	e := newEnv(t)
	s := newServer(t, Config{Limiter: e.lim, Version: "v1", Policies: []Policy{{Name: "a", Limit: fixed(1, "a"), Key: Constant("x")}}})
	client := startServer(t, s, serverOpts{})
	if r := unary(ctxT(t), client); r.err != nil || r.get(MetadataPolicy) != `"a";q=1;w=60` {
		t.Fatalf("v1 call: %v %q", r.err, r.get(MetadataPolicy))
	}
	if r := unary(ctxT(t), client); !IsRateLimited(r.err) {
		t.Fatalf("second v1 call: %v, want a refusal", r.err)
	}
	if err := s.Update(Config{Limiter: e.lim, Version: "v2", Logger: quiet,
		Methods: map[string][]Policy{unaryMethod: {{Name: "b", Limit: fixed(5, "b"), Key: Constant("x")}}}}); err != nil {
		t.Fatal(err)
	}
	if s.Version() != "v2" {
		t.Errorf("Version() = %q, want v2", s.Version())
	}
	r := unary(ctxT(t), client)
	if r.err != nil || r.get(MetadataPolicy) != `"b";q=5;w=60` || r.get(MetadataRateLimit) != `"b";r=4;t=40` {
		t.Errorf("v2 call: %v %q %q", r.err, r.get(MetadataPolicy), r.get(MetadataRateLimit))
	}
	if r := stream(ctxT(t), client, 1); r.err != nil || r.get(MetadataPolicy) != "" {
		t.Errorf("v2 stream (no policy of v2 applies to it): %v %q", r.err, r.get(MetadataPolicy))
	}
}

// TestUpdateStreamKeepsItsVersion checks that a stream opened before an
// Update is charged per message under the Config of its open until it
// ends, and a stream opened after it under the new one.
func TestUpdateStreamKeepsItsVersion(t *testing.T) {
	e := newEnv(t)
	cfg := func(version string, n int64) Config {
		return Config{Limiter: e.lim, Version: version, Logger: quiet,
			Policies: []Policy{{Name: "messages", Limit: fixed(n, "messages-"+version), Key: Constant("m"), PerMessage: true}}}
	}
	s := newServer(t, cfg("v1", 2))
	client := startServer(t, s, serverOpts{})
	st, err := client.FullDuplexCall(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	exchange := func() error {
		if err := st.Send(&testgrpc.StreamingOutputCallRequest{}); err != nil {
			return err
		}
		_, err := st.Recv()
		return err
	}
	if err := exchange(); err != nil { // the stream is open, under v1
		t.Fatal(err)
	}
	if err := s.Update(cfg("v2", 100)); err != nil {
		t.Fatal(err)
	}
	if err := exchange(); err != nil {
		t.Fatalf("second message (v1 allows 2): %v", err)
	}
	if err := exchange(); !IsRateLimited(err) {
		t.Fatalf("third message: %v, want v1's refusal (v2 would allow it)", err)
	}
	if r := stream(ctxT(t), client, 3); r.err != nil {
		t.Errorf("a stream opened under v2: %v", r.err)
	}
}

// TestUpdateReleasesLeaseUnderItsVersion checks that a unary call's
// concurrency slot, taken under one Config, is released when the call
// ends after an Update, and that a call meanwhile is decided under the
// new Config.
func TestUpdateReleasesLeaseUnderItsVersion(t *testing.T) {
	e := newEnv(t)
	slots1 := sluice.Must(sluice.Concurrency(1, time.Minute)).Named("slots-v1")
	slots2 := sluice.Must(sluice.Concurrency(5, time.Minute)).Named("slots-v2")
	cfg := func(version string, l sluice.Limit) Config {
		return Config{Limiter: e.lim, Version: version, Logger: quiet, Policies: []Policy{{Name: "slots", Limit: l, Key: Constant("c")}}}
	}
	s := newServer(t, cfg("v1", slots1))
	ic := s.UnaryServerInterceptor()
	info := &grpc.UnaryServerInfo{FullMethod: unaryMethod}
	isFree := func(l sluice.Limit) bool {
		t.Helper()
		return free(t, e.lim, "all:c", l) > 0
	}
	outer, inner := &fakeTransport{}, &fakeTransport{}
	call := func(ft *fakeTransport, h grpc.UnaryHandler) error {
		_, err := ic(grpc.NewContextWithServerTransportStream(ctxT(t), ft), nil, info, h)
		return err
	}
	err := call(outer, func(context.Context, any) (any, error) {
		if isFree(slots1) {
			t.Error("the v1 call's slot is free while it runs")
		}
		if err := s.Update(cfg("v2", slots2)); err != nil {
			t.Error(err)
		}
		if err := call(inner, func(context.Context, any) (any, error) { return nil, nil }); err != nil {
			t.Errorf("call after the Update: %v", err)
		}
		return nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := func(ft *fakeTransport, q, r string) {
		t.Helper()
		if p, rl := first(ft.md, MetadataPolicy), first(ft.md, MetadataRateLimit); p != `"slots";q=`+q+`;qu="concurrent-requests"` || rl != `"slots";r=`+r {
			t.Errorf("metadata %q %q, want q=%s r=%s", p, rl, q, r)
		}
	}
	want(outer, "1", "0")
	want(inner, "5", "4")
	if !isFree(slots1) {
		t.Error("the v1 call's slot is still taken after it ended under v2")
	}
	if !isFree(slots2) {
		t.Error("the v2 call's slot is still taken")
	}
}

func first(md metadata.MD, key string) string {
	if v := md.Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

// TestUpdateRejects checks that Update refuses what New refuses, another
// Limiter, and a concurrency policy once MiddlewareLimiter is in use; the
// Config in force stays.
func TestUpdateRejects(t *testing.T) {
	e := newEnv(t)
	other := newEnv(t).lim
	p := Policy{Name: "p", Limit: fixed(1, "p"), Key: Constant("x")}
	s := newServer(t, Config{Limiter: e.lim, Version: "good", Policies: []Policy{p}})
	conc := Policy{Name: "c", Limit: sluice.Must(sluice.Concurrency(1, time.Minute)), Key: Constant("x")}
	check := func(name string, cfg Config) {
		t.Helper()
		if err := s.Update(cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: Update = %v, want ErrConfig", name, err)
		}
		if s.Version() != "good" {
			t.Errorf("%s: Version() = %q after a refused Update", name, s.Version())
		}
	}
	check("no limiter", Config{Version: "bad", Policies: []Policy{p}})
	check("other limiter", Config{Limiter: other, Version: "bad", Policies: []Policy{p}})
	check("duplicate", Config{Limiter: e.lim, Version: "bad", Policies: []Policy{p, p}})
	check("method pattern", Config{Limiter: e.lim, Version: "bad", Methods: map[string][]Policy{"Svc": {p}}})
	if _, err := s.MiddlewareLimiter(); err != nil {
		t.Fatal(err)
	}
	check("concurrency under MiddlewareLimiter", Config{Limiter: e.lim, Version: "bad", Policies: []Policy{conc}})
	if err := s.Update(Config{Limiter: e.lim, Version: "next", Policies: []Policy{p}}); err != nil || s.Version() != "next" {
		t.Errorf("a valid Update: %v, version %q", err, s.Version())
	}
}
