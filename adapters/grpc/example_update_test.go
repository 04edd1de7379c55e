package grpclimit_test

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"

	"github.com/sluice-go/sluice"
	grpclimit "github.com/sluice-go/sluice/adapters/grpc"
)

// Update puts a new Config in force for the calls that arrive after it;
// one it refuses leaves the one in force serving.
func ExampleServer_Update() {
	lim, stop := exampleLimiter()
	defer stop()
	config := func(version string, perMinute int64) grpclimit.Config {
		return grpclimit.Config{Limiter: lim, Version: version, Policies: []grpclimit.Policy{{Name: "all",
			Limit: sluice.Must(sluice.FixedWindow(perMinute, time.Minute)).Named("all"), Key: grpclimit.Constant("all")}}}
	}
	s, err := grpclimit.New(config("v1", 10))
	if err != nil {
		panic(err)
	}
	client, done := serveExample(grpc.UnaryInterceptor(s.UnaryServerInterceptor()))
	defer done()
	call := func() {
		var md metadata.MD
		_, err := client.UnaryCall(context.Background(), &testgrpc.SimpleRequest{}, grpc.Header(&md))
		fmt.Println(s.Version(), err, md.Get(grpclimit.MetadataPolicy))
	}
	call()
	if err := s.Update(config("v2", 100)); err != nil {
		panic(err)
	}
	call()
	bad := config("v3", 1000)
	bad.Methods = map[string][]grpclimit.Policy{"Greeter": bad.Policies}
	fmt.Println(s.Update(bad))
	call()
	// Output:
	// v1 <nil> ["all";q=10;w=60]
	// v2 <nil> ["all";q=100;w=60]
	// grpclimit: invalid config: grpclimit: Methods key "Greeter": want "/pkg.Service/Method" or "/pkg.Service/*"
	// v2 <nil> ["all";q=100;w=60]
}
