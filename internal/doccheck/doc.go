// Package doccheck keeps the Go blocks of README.md and docs/*.md
// compiling: its test extracts every block, wraps the fragments in a
// package of their own, builds them all with the workspace's modules, and
// reports each compile error at its line in the Markdown file.
//
// A block may leave names free that its prose supplies (client, ctx, mux,
// a user's own package): "undefined: name" for a bare identifier is not
// an error, nor is a variable or import the fragment leaves unused. Any
// other error — a function that does not exist in a sluice package, a
// wrong argument, a value used where its type does not fit — fails the
// test. A block that is one composite literal starting with "{" is taken as
// an element of []httplimit.Policy, the docs' policy literals.
package doccheck
