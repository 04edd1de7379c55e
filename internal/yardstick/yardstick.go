// Package yardstick holds the scripts sluice's measurements compare its
// own with: the least a GCRA decision can cost in Redis, and that same
// script with what sluice's script contract adds around any algorithm.
// The bench's redis-benchmark ceiling runs CeilingGCRA; the scripts'
// cost test measures both, so the two places measure one text.
package yardstick

import (
	"strconv"
	"strings"
)

// CeilingGCRA is the least a GCRA decision can cost in Redis: TIME, GET
// the theoretical arrival time, SET it back with a TTL. No argument
// checks, no exact fractions, no reply beyond allowed (1) or denied (0).
// It is the yardstick, not a limiter anyone should ship.
//
// KEYS[1] holds the TAT in µs; ARGV[1] is the emission interval T in µs,
// ARGV[2] the tolerance burst×T in µs.
const CeilingGCRA = `local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then tat = now end
local nt = tat + tonumber(ARGV[1])
if nt - now > tonumber(ARGV[2]) then return 0 end
redis.call('SET', KEYS[1], string.format('%d', nt), 'PX', math.floor((nt - now) / 1000) + 2)
return 1
`

// ContractGCRA is CeilingGCRA with only what sluice's script contract
// adds outside an algorithm's logic: the reply is the four numbers every
// built-in script returns (allowed, remaining, retry_after, reset_after),
// and the call carries gcra's six ARGV (ContractArgs: the ceiling's two,
// then four it ignores, where gcra has its burst, cost, optional clock and
// optional peek), so no script keeping that contract can cost less.
var ContractGCRA = strings.NewReplacer("return 0", "return {0, 0, 0, 0}", "return 1\n", "return {1, 0, 0, 0}\n").Replace(CeilingGCRA)

// CeilingArgs are CeilingGCRA's ARGV for an emission interval of t µs
// (the period over the limit) and a burst of burst.
func CeilingArgs(t, burst int64) []string {
	return []string{strconv.FormatInt(t, 10), strconv.FormatInt(t*burst, 10)}
}

// ContractArgs are ContractGCRA's ARGV: CeilingArgs, then the burst, a
// cost of 1 and two unset optional arguments, as gcra's are sent.
func ContractArgs(t, burst int64) []string {
	return append(CeilingArgs(t, burst), strconv.FormatInt(burst, 10), "1", "", "")
}
