// Package gen turns annotated Redis Lua scripts into typed Go wrappers. It
// is the library behind the luagen command and is pure: Parse reads one
// script's annotation header (docs/annotations.md) into a Script, and
// Generate renders a whole package's scripts into a map of output path to
// gofmt-clean Go source, without touching the disk. The command does the
// reading, writing and reporting.
//
// Errors are positioned (file.lua:LINE:COL: message) and collected: Parse
// and Generate return an ErrorList holding every problem in every file, in
// line order, so one run reports them all.
//
// The generated code calls the runtime package
// github.com/sluice-go/sluice/runtime/luart, and checks at compile time that
// its generated-code version is one the runtime accepts.
package gen
