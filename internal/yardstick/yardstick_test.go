package yardstick

import (
	"strings"
	"testing"
)

func TestContractGCRA(t *testing.T) {
	// Both replies become four numbers, and nothing else changes.
	if n := strings.Count(ContractGCRA, "return {"); n != 2 {
		t.Fatalf("ContractGCRA has %d table replies, want 2:\n%s", n, ContractGCRA)
	}
	back := strings.NewReplacer("return {0, 0, 0, 0}", "return 0", "return {1, 0, 0, 0}", "return 1").Replace(ContractGCRA)
	if back != CeilingGCRA {
		t.Fatalf("ContractGCRA differs from CeilingGCRA beyond its replies:\n%s", ContractGCRA)
	}
	if got := CeilingArgs(10000, 100); strings.Join(got, ",") != "10000,1000000" {
		t.Errorf("CeilingArgs(10000, 100) = %q", got)
	}
	if got := ContractArgs(10000, 100); len(got) != 6 || got[0] != "10000" || got[2] != "100" || got[3] != "1" || got[4] != "" || got[5] != "" {
		t.Errorf("ContractArgs(10000, 100) = %q", got)
	}
}
