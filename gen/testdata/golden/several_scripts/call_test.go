package scripts

import (
	"reflect"
	"testing"

	"github.com/sluice-go/sluice/runtime/luart"
)

var sink luart.Call

// TestFixedCall checks a call of fixed KEYS and ARGV: one allocation shared
// by both, Keys capped so that an append to it cannot overwrite Args.
func TestFixedCall(t *testing.T) {
	c := Acquire.Call(AcquireKeys{Slots: "{s}:slots"}, AcquireArgs{ID: "a", Max: 3})
	if !reflect.DeepEqual(c.Keys, []string{"{s}:slots"}) || !reflect.DeepEqual(c.Args, []string{"a", "3"}) {
		t.Errorf("Keys %q, Args %q", c.Keys, c.Args)
	}
	_ = append(c.Keys, "extra")
	if c.Args[0] != "a" || cap(c.Keys) != 1 {
		t.Errorf("append to Keys changed Args: %q (cap(Keys) = %d)", c.Args, cap(c.Keys))
	}
	keys, args := AcquireKeys{Slots: "{s}:slots"}, AcquireArgs{ID: "a", Max: 3}
	if n := testing.AllocsPerRun(100, func() { sink = Acquire.Call(keys, args) }); n != 1 {
		t.Errorf("Acquire.Call allocates %v times, want 1", n)
	}
	if c := Count.Call(CountKeys{Slots: "{s}:slots"}, CountArgs{}); !reflect.DeepEqual(c.Keys, []string{"{s}:slots"}) || c.Args != nil {
		t.Errorf("Count: Keys %q, Args %q", c.Keys, c.Args)
	}
}
