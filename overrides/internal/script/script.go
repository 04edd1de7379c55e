// Package script holds the Redis Lua scripts of package overrides, each
// with its generated typed wrapper beside it. Edit the .lua files and run
// go generate; never edit the .lua.go files by hand.
package script

//go:generate go run ../../../cmd/luagen .
