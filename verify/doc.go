// Package verify tests and lints Redis Lua scripts offline, for sluice's
// built-in scripts and for any user script. The luagen command exposes it
// as "luagen vet" and "luagen test"; docs/testing.md walks through both.
//
// Environments. An Env is one place a script runs, each with a settable
// clock that starts at StartTime:
//
//   - Sandbox: a gopher-lua interpreter that behaves like Redis 7's Lua over
//     an in-process store and records every command of a run (Sandbox.Run).
//   - MiniredisEnv: a miniredis server (NewMiniredis).
//   - RedisEnv: a real Redis, in one empty database (DialRedis).
//
// Step files. NAME.steps.txtar beside NAME.lua lists calls of the script at
// fixed instants with the replies, TTLs and state they must produce (see
// ParseStepFile for the format). RunSteps and RunStepFile run steps on
// several environments in lockstep and check that the environments agree
// after every step: the differential test. Reply patterns (ParseReply)
// match exact replies, ranges and tolerances for durations, and JSON
// documents.
//
// Vet. Vet, VetFile and VetSource return the Findings of static checks on
// the syntax tree and run-time checks on sandbox runs: keys not in KEYS,
// keys in different cluster slots, keys left without a TTL, globals, float
// replies, forbidden commands, unused or undeclared inputs, replies that
// differ from their @return annotations, writes in @readonly scripts
// (Checks lists them).
//
// Tests. RunT, SandboxT, RedisT, EnvsT and CheckStepFile give Go tests
// environments that are closed when the test ends, and report through a
// Tester (a *testing.T).
package verify
