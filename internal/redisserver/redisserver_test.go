package redisserver

import (
	"strings"
	"testing"
)

func TestStart(t *testing.T) {
	s := Start(t)
	if _, err := s.Command("SET", "k", "v"); err != nil {
		t.Fatal(err)
	}
	got, err := s.Command("GET", "k")
	if err != nil || got != "v" {
		t.Fatalf("GET k = %q, %v; want v", got, err)
	}
	if _, err := s.Command("NOSUCHCOMMAND"); err == nil || !strings.Contains(err.Error(), "unknown command") {
		t.Fatalf("want unknown command error, got %v", err)
	}
}

func TestStartCluster(t *testing.T) {
	c := StartCluster(t, 3)
	if len(c.Addrs()) != 3 {
		t.Fatalf("want 3 nodes, got %v", c.Addrs())
	}
	info, err := c.Nodes[0].Command("CLUSTER", "INFO")
	if err != nil || !strings.Contains(info, "cluster_known_nodes:3") {
		t.Fatalf("CLUSTER INFO = %q, %v", info, err)
	}
}
