// Package release rehearses a release of sluice's modules before it is
// tagged. Its test (release_test.go) builds a file-system module proxy from
// the working tree, with the core and every published nested module at the
// next version, then plays a user outside this repository: a fresh module
// that go gets the core and the chi adapter, installs luagen with go get
// -tool, generates Go from its own Lua script and builds a net/http server
// on the chi middleware, with no replace directive and no workspace.
//
// It is its own module, never published and never required, so that
// golang.org/x/mod stays out of the published modules' requirements.
package release
