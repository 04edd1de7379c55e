// Package policyfile reads and writes sluice's policy files: rate-limit
// policies as data (YAML, or JSON, which is YAML), saying everything the Go
// Config of the HTTP adapter (httplimit) and the gRPC adapter (grpclimit)
// says but their funcs.
//
// Parse and Load read a file into a Config, plain Go values; Marshal writes
// a Config back out in canonical form. Every problem of a file is reported
// in one run, each at its file:line:col (Errors): unknown fields (with the
// nearest known name), duplicate keys and policy names, wrong types, bad
// durations and CIDR prefixes, limits sluice refuses, unknown identities
// and tiers. httplimit.FromFile and grpclimit.FromFile turn a Config into
// the adapters' Config; Schema is the format's JSON Schema, for editors.
//
// The package depends on the core sluice package only. docs/policies.md in
// the repository documents every field.
package policyfile
