package server

import (
	"testing"
)

func TestStartAndStop(t *testing.T) {
	var s *Server
	t.Run("start", func(t *testing.T) {
		s = Start(t)
		if reply, err := s.Command("PING"); err != nil || reply != "PONG" {
			t.Fatalf("PING = %q, %v; want PONG", reply, err)
		}
		if s.Addr == "127.0.0.1:6379" {
			t.Fatalf("server took the shared port 6379")
		}
		if _, err := s.Command("SET", "k", "v"); err != nil {
			t.Fatal(err)
		}
		if v, err := s.Command("GET", "k"); err != nil || v != "v" {
			t.Fatalf("GET k = %q, %v; want v", v, err)
		}
	})
	if s == nil || t.Skipped() {
		return
	}
	// The subtest's cleanup has stopped the server.
	if s.cmd != nil {
		t.Fatal("server still marked running after the test ended")
	}
	if _, err := s.Command("PING"); err == nil {
		t.Fatalf("server at %s still answers after Stop", s.Addr)
	}
	s.Stop() // a second Stop is harmless
}
