// Package conformance is the one test suite every HTTP adapter of sluice
// passes: the same requests against net/http, chi, gin, echo v5 and echo
// v4 must give identical status codes, headers and bodies.
package conformance
