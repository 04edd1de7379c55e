// Package scripts holds sluice's built-in Redis Lua scripts, one annotated
// NAME.lua per algorithm, each with its generated typed wrapper NAME.lua.go
// beside it. Edit the .lua files and run go generate; never edit the .lua.go
// files by hand.
package scripts

//go:generate go run ../cmd/luagen .
