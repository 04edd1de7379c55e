package main

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The demo's service, written by hand: its messages are the well-known
// google.protobuf.StringValue, so it needs no generated code. As a .proto
// file it would read:
//
//	syntax = "proto3";
//	package sluice.example;
//	import "google/protobuf/wrappers.proto";
//	service Greeter {
//	  rpc Hello(google.protobuf.StringValue) returns (google.protobuf.StringValue);
//	  rpc Expensive(google.protobuf.StringValue) returns (google.protobuf.StringValue);
//	  rpc Chat(stream google.protobuf.StringValue) returns (stream google.protobuf.StringValue);
//	}
const (
	serviceName     = "sluice.example.Greeter"
	methodHello     = "/" + serviceName + "/Hello"
	methodExpensive = "/" + serviceName + "/Expensive"
	methodChat      = "/" + serviceName + "/Chat"
	protoFile       = "sluice/example/greeter.proto"
)

// greeter implements the service.
type greeter struct{}

// greeterServer is the interface grpc.Server.RegisterService checks the
// implementation against.
type greeterServer interface {
	hello(context.Context, *wrapperspb.StringValue) (*wrapperspb.StringValue, error)
	expensive(context.Context, *wrapperspb.StringValue) (*wrapperspb.StringValue, error)
	chat(grpc.ServerStream) error
}

func (greeter) hello(_ context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
	name := in.GetValue()
	if name == "" {
		name = "world"
	}
	return wrapperspb.String("hello, " + name), nil
}

func (greeter) expensive(_ context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
	return wrapperspb.String(strings.ToUpper(in.GetValue())), nil
}

// chat echoes every message until the client closes its side.
func (greeter) chat(ss grpc.ServerStream) error {
	for {
		in := new(wrapperspb.StringValue)
		if err := ss.RecvMsg(in); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if err := ss.SendMsg(in); err != nil {
			return err
		}
	}
}

// unary is the MethodDesc of a unary method taking and returning a
// StringValue.
func unary(name string, call func(greeterServer, context.Context, *wrapperspb.StringValue) (*wrapperspb.StringValue, error)) grpc.MethodDesc {
	full := "/" + serviceName + "/" + name
	return grpc.MethodDesc{
		MethodName: name,
		Handler: func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			if interceptor == nil {
				return call(srv.(greeterServer), ctx, in)
			}
			info := &grpc.UnaryServerInfo{Server: srv, FullMethod: full}
			return interceptor(ctx, in, info, func(ctx context.Context, req any) (any, error) {
				return call(srv.(greeterServer), ctx, req.(*wrapperspb.StringValue))
			})
		},
	}
}

// greeterDesc is what protoc-gen-go-grpc would generate for the service.
var greeterDesc = grpc.ServiceDesc{
	ServiceName: serviceName,
	HandlerType: (*greeterServer)(nil),
	Methods: []grpc.MethodDesc{
		unary("Hello", greeterServer.hello),
		unary("Expensive", greeterServer.expensive),
	},
	Streams: []grpc.StreamDesc{{
		StreamName:    "Chat",
		Handler:       func(srv any, ss grpc.ServerStream) error { return srv.(greeterServer).chat(ss) },
		ServerStreams: true,
		ClientStreams: true,
	}},
	Metadata: protoFile,
}

var chatDesc = &greeterDesc.Streams[0]

var (
	registerOnce sync.Once
	registerErr  error
)

// registerDescriptor adds the service's file descriptor to the global
// registry, where the reflection service finds it, so grpcurl can call
// the service without a .proto file.
func registerDescriptor() error {
	registerOnce.Do(func() {
		sv := ".google.protobuf.StringValue"
		method := func(name string, stream bool) *descriptorpb.MethodDescriptorProto {
			m := &descriptorpb.MethodDescriptorProto{Name: proto.String(name), InputType: proto.String(sv), OutputType: proto.String(sv)}
			if stream {
				m.ClientStreaming, m.ServerStreaming = proto.Bool(true), proto.Bool(true)
			}
			return m
		}
		fd, err := protodesc.NewFile(&descriptorpb.FileDescriptorProto{
			Name:       proto.String(protoFile),
			Package:    proto.String("sluice.example"),
			Dependency: []string{"google/protobuf/wrappers.proto"},
			Syntax:     proto.String("proto3"),
			Service: []*descriptorpb.ServiceDescriptorProto{{
				Name:   proto.String("Greeter"),
				Method: []*descriptorpb.MethodDescriptorProto{method("Hello", false), method("Expensive", false), method("Chat", true)},
			}},
		}, protoregistry.GlobalFiles)
		if err == nil {
			err = protoregistry.GlobalFiles.RegisterFile(fd)
		}
		registerErr = err
	})
	return registerErr
}
