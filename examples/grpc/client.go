package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	grpclimit "github.com/sluice-go/sluice/adapters/grpc"
)

// callTimeout bounds each call of the demo: generous, so a loaded machine
// does not make a call fail, and longer than any RetryInfo the client
// interceptor waits out (maxWait).
const callTimeout = 30 * time.Second

// maxWait is the longest RetryInfo the client interceptor waits out.
const maxWait = 5 * time.Second

// demo calls the server at addr and prints what each call got. It fails
// only when a call ends in something but success or a refusal by a rate
// limit.
func demo(ctx context.Context, addr string, cfg config, out io.Writer) error {
	plain, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer plain.Close()

	// The client interceptor retries a call refused with a RetryInfo after
	// the delay, once, when the delay is at most maxWait. attempts counts
	// what reaches the server (the interceptor is outermost).
	retry, err := grpclimit.NewClient(grpclimit.ClientConfig{Retries: 1, MaxWait: maxWait})
	if err != nil {
		return err
	}
	var attempts atomic.Int64
	count := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		attempts.Add(1)
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	retrying, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(retry.UnaryClientInterceptor(), count))
	if err != nil {
		return err
	}
	defer retrying.Close()

	fmt.Fprintf(out, "\nHello, %d calls from one client IP:\n", cfg.limit+1)
	for i := range cfg.limit + 1 {
		if err := unaryCall(ctx, out, plain, fmt.Sprintf("Hello #%d", i+1), methodHello, "world", true); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "\nHello with an API key (%s metadata: a quota of its own):\n", apiKeyHeader)
	keyed := metadata.AppendToOutgoingContext(ctx, apiKeyHeader, "demo-key")
	if err := unaryCall(keyed, out, plain, "Hello", methodHello, "key holder", true); err != nil {
		return err
	}

	fmt.Fprintf(out, "\nExpensive, one call per 2 s for every client together:\n")
	for i := range 3 { // until refused: a second call in the same 2 s is
		refused, err := unaryCallRefused(ctx, out, plain, fmt.Sprintf("Expensive #%d", i+1), methodExpensive, "report", false)
		if err != nil {
			return err
		}
		if refused {
			break
		}
	}

	fmt.Fprintf(out, "\nThrough the client interceptor (it waits out a RetryInfo up to %v):\n", maxWait)
	for _, m := range []struct{ label, method string }{{"Expensive", methodExpensive}, {"Hello", methodHello}} {
		attempts.Store(0)
		start := time.Now()
		callCtx, cancel := context.WithTimeout(ctx, callTimeout)
		reply := new(wrapperspb.StringValue)
		err := retrying.Invoke(callCtx, m.method, wrapperspb.String("again"), reply)
		cancel()
		took := time.Since(start).Round(10 * time.Millisecond)
		n := attempts.Load()
		if err == nil {
			fmt.Fprintf(out, "%s: OK %q after %s in %v\n", m.label, reply.GetValue(), plural(n, "attempt"), took)
			continue
		}
		if !grpclimit.IsRateLimited(err) {
			return fmt.Errorf("%s through the client interceptor: %w", m.label, err)
		}
		delay, _ := grpclimit.RetryDelay(err)
		why := ""
		if delay > maxWait {
			why = fmt.Sprintf(": its RetryInfo (%v) is over MaxWait, so it fails at once", delay.Round(time.Millisecond))
		}
		fmt.Fprintf(out, "%s: %v after %s in %v%s\n", m.label, status.Code(err), plural(n, "attempt"), took, why)
	}

	fmt.Fprintf(out, "\nChat, one open stream per client:\n")
	return chat(ctx, out, plain)
}

// unaryCall makes one unary call and prints its outcome; a refusal is
// printed with its details when full is set.
func unaryCall(ctx context.Context, out io.Writer, cc *grpc.ClientConn, label, method, arg string, full bool) error {
	_, err := unaryCallRefused(ctx, out, cc, label, method, arg, full)
	return err
}

// unaryCallRefused is unaryCall, and reports whether the call was refused.
func unaryCallRefused(ctx context.Context, out io.Writer, cc *grpc.ClientConn, label, method, arg string, full bool) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	var header, trailer metadata.MD
	reply := new(wrapperspb.StringValue)
	err := cc.Invoke(ctx, method, wrapperspb.String(arg), reply, grpc.Header(&header), grpc.Trailer(&trailer))
	if err != nil {
		return true, printRefusal(out, label, err, trailer, full)
	}
	fmt.Fprintf(out, "%s: OK %q  ratelimit: %s\n", label, reply.GetValue(), strings.Join(header.Get(grpclimit.MetadataRateLimit), ", "))
	return false, nil
}

// printRefusal prints a refusal decoded from its status: the code and
// message, the RetryInfo delay, and with full the QuotaFailure and
// ErrorInfo details and the trailer. Any other error is returned.
func printRefusal(out io.Writer, label string, err error, trailer metadata.MD, full bool) error {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.ResourceExhausted {
		return fmt.Errorf("%s: %w", label, err)
	}
	fmt.Fprintf(out, "%s: %v %q\n", label, st.Code(), st.Message())
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			fmt.Fprintf(out, "  RetryInfo     retry_delay %v\n", d.GetRetryDelay().AsDuration())
		case *errdetails.QuotaFailure:
			for _, v := range d.GetViolations() {
				if full {
					fmt.Fprintf(out, "  QuotaFailure  %s: %s\n", v.GetSubject(), v.GetDescription())
				}
			}
		case *errdetails.ErrorInfo:
			if full {
				fmt.Fprintf(out, "  ErrorInfo     reason %s, domain %s, policies %s\n", d.GetReason(), d.GetDomain(), d.GetMetadata()["policies"])
			}
		}
	}
	if full {
		fmt.Fprintf(out, "  trailer       %s: %s; %s: %s; %s: %s\n",
			grpclimit.MetadataRateLimit, strings.Join(trailer.Get(grpclimit.MetadataRateLimit), ", "),
			grpclimit.MetadataPolicy, strings.Join(trailer.Get(grpclimit.MetadataPolicy), ", "),
			grpclimit.MetadataPushback, strings.Join(trailer.Get(grpclimit.MetadataPushback), ", "))
	}
	return nil
}

// chat opens a stream and, while it is open, a second one, which the
// concurrency policy refuses; once the first is closed (the server has
// released its slot when the client sees the stream end), a third opens.
func chat(ctx context.Context, out io.Writer, cc *grpc.ClientConn) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	first, err := openChat(ctx, out, cc, "Chat #1", "one")
	if err != nil {
		return err
	}
	const label2 = "Chat #2 (while #1 is open)"
	second, err := cc.NewStream(ctx, chatDesc, methodChat)
	if err != nil {
		return fmt.Errorf("%s: %w", label2, err)
	}
	// The refusal comes back as the stream's status: Send may already see
	// the stream closed (io.EOF), Recv returns the status.
	if err := second.SendMsg(wrapperspb.String("two")); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("%s: %w", label2, err)
	}
	err = second.RecvMsg(new(wrapperspb.StringValue))
	if err == nil {
		return fmt.Errorf("%s: admitted", label2)
	}
	if err := printRefusal(out, label2, err, second.Trailer(), false); err != nil {
		return err
	}
	if err := closeChat(first); err != nil {
		return fmt.Errorf("%s: %w", "Chat #1", err)
	}
	fmt.Fprintln(out, "Chat #1: closed; its slot is free")
	third, err := openChat(ctx, out, cc, "Chat #3", "three")
	if err != nil {
		return err
	}
	return closeChat(third)
}

// openChat opens a Chat stream, sends msg and prints the echo and the
// stream's rate-limit metadata.
func openChat(ctx context.Context, out io.Writer, cc *grpc.ClientConn, label, msg string) (grpc.ClientStream, error) {
	s, err := cc.NewStream(ctx, chatDesc, methodChat)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", label, err)
	}
	if err := s.SendMsg(wrapperspb.String(msg)); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s: %w", label, err)
	}
	echo := new(wrapperspb.StringValue)
	if err := s.RecvMsg(echo); err != nil {
		return nil, printRefusalOr(out, label, err, s.Trailer())
	}
	header, err := s.Header()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", label, err)
	}
	fmt.Fprintf(out, "%s: open, echoed %q  ratelimit: %s\n", label, echo.GetValue(), strings.Join(header.Get(grpclimit.MetadataRateLimit), ", "))
	return s, nil
}

// printRefusalOr prints a refusal and still fails: the demo needed the
// stream open.
func printRefusalOr(out io.Writer, label string, err error, trailer metadata.MD) error {
	if perr := printRefusal(out, label, err, trailer, false); perr != nil {
		return perr
	}
	return fmt.Errorf("%s: refused: %w", label, err)
}

// closeChat closes the client's side and reads the stream to its end: the
// server's handler has returned, and released the stream's slot, by then.
func closeChat(s grpc.ClientStream) error {
	if err := s.CloseSend(); err != nil {
		return err
	}
	for {
		if err := s.RecvMsg(new(wrapperspb.StringValue)); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

// plural is "1 attempt", "2 attempts".
func plural(n int64, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}
