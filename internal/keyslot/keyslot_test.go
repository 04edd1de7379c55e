package keyslot

import "testing"

// The values are what CLUSTER KEYSLOT printed on redis-server 7.0.
func TestOf(t *testing.T) {
	for key, want := range map[string]int{
		"123456789":            12739,
		"foo":                  12182,
		"{user1000}.following": 3443,
		"user1000":             3443,
		"foo{}{bar}":           8363, // an empty tag: the whole key
		"foo{{bar}}zap":        4015, // the tag is "{bar"
		"{bar":                 4015,
	} {
		if got := Of(key); got != want {
			t.Errorf("Of(%q) = %d, want %d", key, got, want)
		}
	}
}
