// Package verify tests and lints Redis Lua scripts offline, for sluice's
// built-in scripts and for any user script.
//
// It has three parts:
//
//   - Environments (Env): the Sandbox, a gopher-lua interpreter that
//     behaves like Redis 7's Lua over an in-process store and records every
//     command; MiniredisEnv, a miniredis server (RunT gives one with a
//     rueidis client for tests); and RedisEnv, a real Redis (RedisT starts a
//     throwaway redis-server, or uses SLUICE_REDIS_ADDR). Each has a
//     settable clock.
//   - Step files (NAME.steps.txtar beside NAME.lua, see ParseStepFile):
//     calls of a script at fixed instants with the replies, TTLs and state
//     they must produce. RunSteps runs them on several environments in
//     lockstep and also checks that the environments agree after every
//     step: the differential test.
//   - Vet: static checks on the syntax tree and run-time checks on sandbox
//     runs (keys not in KEYS, keys in different cluster slots, keys written
//     without a TTL, globals, float replies, forbidden commands, unused or
//     undeclared inputs, replies that differ from their @return
//     annotations, writes in @readonly scripts).
//
// The luagen command exposes Vet and the step files as "luagen vet" and
// "luagen test" (VetCommand, TestCommand). docs/testing.md walks through
// both.
package verify
