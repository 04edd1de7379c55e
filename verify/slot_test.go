package verify_test

import (
	"strconv"
	"testing"

	"github.com/sluice-go/sluice/internal/redisserver"
	"github.com/sluice-go/sluice/verify"
)

// TestSlotMatchesRedis compares Slot with CLUSTER KEYSLOT of a
// cluster-enabled redis-server, hash tags included.
func TestSlotMatchesRedis(t *testing.T) {
	srv := redisserver.Start(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
	for _, key := range []string{
		"", "foo", "123456789", "{user1000}.following", "{user1000}.followers", "foo{}{bar}",
		"foo{{bar}}zap", "foo{bar}{zap}", "{}", "{", "}{x}", "sluice:{gcra}:state", "é{ü}",
	} {
		out, err := srv.Command("CLUSTER", "KEYSLOT", key)
		if err != nil {
			t.Fatalf("CLUSTER KEYSLOT %q: %v", key, err)
		}
		want, err := strconv.Atoi(out)
		if err != nil {
			t.Fatalf("CLUSTER KEYSLOT %q = %q", key, out)
		}
		if got := verify.Slot(key); got != want {
			t.Errorf("Slot(%q) = %d, redis says %d", key, got, want)
		}
	}
}
