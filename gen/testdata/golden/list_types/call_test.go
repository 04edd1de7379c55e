package scripts

import (
	"reflect"
	"testing"
)

func TestListTypes(t *testing.T) {
	c := Mean.Call(MeanKeys{}, MeanArgs{Samples: []float64{0.25, 1e6, -3, 1.5e-7}})
	if want := []string{"0.25", "1000000", "-3", "0.00000015"}; !reflect.DeepEqual(c.Args, want) || c.Keys != nil {
		t.Errorf("Mean: Keys %q, Args %q, want no keys and %q", c.Keys, c.Args, want)
	}
	f := Flags.Call(FlagsKeys{Bits: "{b}:bits"}, FlagsArgs{Offset: 8, Values: []bool{true, false, true}})
	if want := []string{"8", "1", "0", "1"}; !reflect.DeepEqual(f.Args, want) || !reflect.DeepEqual(f.Keys, []string{"{b}:bits"}) {
		t.Errorf("Flags: Keys %q, Args %q, want [{b}:bits] and %q", f.Keys, f.Args, want)
	}
}
