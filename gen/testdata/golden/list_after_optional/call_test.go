package scripts

import (
	"reflect"
	"testing"

	"github.com/sluice-go/sluice/runtime/luart"
)

var sink luart.Call

func TestWeightedCall(t *testing.T) {
	now := int64(42)
	for _, tt := range []struct {
		name string
		args WeightedArgs
		want []string
	}{
		{"now set", WeightedArgs{Cost: 2, Now: &now, Weights: []int64{1, 250, -7}}, []string{"2", "42", "1", "250", "-7"}},
		{"now unset", WeightedArgs{Cost: 2, Weights: []int64{1}}, []string{"2", "", "1"}},
		{"no weights", WeightedArgs{Cost: 2}, []string{"2", ""}},
	} {
		c := Weighted.Call(WeightedKeys{Counter: "{w}:c"}, tt.args)
		if !reflect.DeepEqual(c.Keys, []string{"{w}:c"}) || cap(c.Keys) != 1 {
			t.Errorf("%s: Keys = %q (cap %d)", tt.name, c.Keys, cap(c.Keys))
		}
		if !reflect.DeepEqual(c.Args, tt.want) {
			t.Errorf("%s: Args = %q, want %q", tt.name, c.Args, tt.want)
		}
	}
}

func TestWeightedCallAllocs(t *testing.T) {
	keys := WeightedKeys{Counter: "{w}:c"}
	args := WeightedArgs{Cost: 2, Weights: []int64{1, 2, 3, 4}}
	if n := testing.AllocsPerRun(100, func() { sink = Weighted.Call(keys, args) }); n != 1 {
		t.Errorf("Weighted.Call allocates %v times, want 1", n)
	}
}
