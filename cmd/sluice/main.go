// Command sluice is the operator's tool for sluice's limits as data: it
// checks policy files, shows what a request's policies have left, and sets
// per-identity overrides in Redis.
//
// Usage:
//
//	sluice check FILE...
//	sluice inspect -config FILE -redis URL [-json] KEY=VALUE...
//	sluice override set -redis URL -policy NAME (-rate N [-period D] [-burst N] | -exempt | -block) [-for D | -until TIME] [-reason TEXT] IDENTITY
//	sluice override get|rm -redis URL -policy NAME IDENTITY
//	sluice override list -redis URL [-policy NAME] [-json]
//	sluice reset -config FILE -redis URL -policy NAME IDENTITY
//
// IDENTITY is either the key a policy counts ("ip:203.0.113.7",
// "sub:alice", "key:9f86…") or, with -config, request attributes such as
// api_key=SECRET, from which the policy's own identity computes it; raw
// API keys are never printed. Run "sluice help" for the attributes and
// every flag; docs/cli.md has examples.
//
// Exit status: 0 success, 1 a check or command failed, 2 misuse.
// Everything it does is package github.com/sluice-go/sluice/admin.
package main

import (
	"context"
	"os"
	"os/signal"

	"github.com/sluice-go/sluice/admin"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := admin.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
