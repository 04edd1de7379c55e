package scripts

import (
	"reflect"
	"testing"

	"github.com/sluice-go/sluice/runtime/luart"
)

var sink luart.Call

func checkCall(t *testing.T, c luart.Call, script *luart.Script, keys, args []string) {
	t.Helper()
	if c.Script != script {
		t.Errorf("Script = %p, want %p", c.Script, script)
	}
	if !reflect.DeepEqual(c.Keys, keys) {
		t.Errorf("Keys = %q, want %q", c.Keys, keys)
	}
	if !reflect.DeepEqual(c.Args, args) {
		t.Errorf("Args = %q, want %q", c.Args, args)
	}
	if cap(c.Keys) != len(c.Keys) {
		t.Errorf("cap(Keys) = %d, want len(Keys) = %d (an append to Keys would overwrite Args)", cap(c.Keys), len(c.Keys))
	}
}

func TestMultiCall(t *testing.T) {
	now := int64(1_700_000_000_000_000)
	windows := []string{"rl:{u}:1s", "rl:{u}:1h"}
	limits := []int64{10, 1_000_000, -1, 0}
	c := Multi.Call(MultiKeys{Windows: windows}, MultiArgs{Cost: 3, Now: &now, Limits: limits})
	checkCall(t, c, &Multi.Script,
		[]string{"rl:{u}:1s", "rl:{u}:1h"},
		[]string{"3", "1700000000000000", "10", "1000000", "-1", "0"})

	// The call holds copies: changing the caller's slices afterwards, or
	// appending to the call's Keys, changes nothing else.
	windows[0], limits[0] = "changed", 99
	_ = append(c.Keys, "extra")
	checkCall(t, c, &Multi.Script,
		[]string{"rl:{u}:1s", "rl:{u}:1h"},
		[]string{"3", "1700000000000000", "10", "1000000", "-1", "0"})

	// No windows, no limits, Now unset: the optional argument keeps its place.
	checkCall(t, Multi.Call(MultiKeys{}, MultiArgs{Cost: 1}), &Multi.Script, []string{}, []string{"1", ""})
}

func TestSetAllCall(t *testing.T) {
	c := SetAll.Call(SetAllKeys{Targets: []string{"{t}:a", "{t}:b"}}, SetAllArgs{Values: []string{"x", "", "y z"}})
	checkCall(t, c, &SetAll.Script, []string{"{t}:a", "{t}:b"}, []string{"x", "", "y z"})
	checkCall(t, SetAll.Call(SetAllKeys{}, SetAllArgs{}), &SetAll.Script, []string{}, []string{})
}

// TestCallAllocs shows that building a call allocates once (numbers below
// 100 are formatted without allocating, so only the KEYS and ARGV array is
// counted).
func TestCallAllocs(t *testing.T) {
	keys := MultiKeys{Windows: []string{"rl:{u}:1s", "rl:{u}:1m", "rl:{u}:1h"}}
	args := MultiArgs{Cost: 1, Limits: []int64{10, 1, 60, 60, 99, 3}}
	if n := testing.AllocsPerRun(100, func() { sink = Multi.Call(keys, args) }); n != 1 {
		t.Errorf("Multi.Call allocates %v times, want 1", n)
	}
	values := SetAllArgs{Values: []string{"a", "b", "c"}}
	targets := SetAllKeys{Targets: []string{"{t}:a", "{t}:b", "{t}:c"}}
	if n := testing.AllocsPerRun(100, func() { sink = SetAll.Call(targets, values) }); n != 1 {
		t.Errorf("SetAll.Call allocates %v times, want 1", n)
	}
}
