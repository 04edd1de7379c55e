package redisserver

import (
	"crypto/tls"
	"io"
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

func TestKillRestart(t *testing.T) {
	s := Start(t)
	pid := s.PID()
	if _, err := s.Command("SET", "k", "v"); err != nil {
		t.Fatal(err)
	}
	if err := s.Restart(); err == nil {
		t.Fatal("Restart of a running server succeeded")
	}
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Command("PING"); err == nil {
		t.Fatal("PING answered after Kill")
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if s.PID() == pid || s.PID() == 0 {
		t.Fatalf("PID after Restart %d, before %d", s.PID(), pid)
	}
	if got, err := s.Command("GET", "k"); err != nil || got != "" {
		t.Fatalf("GET k after a restart = %q, %v; want an empty dataset", got, err)
	}
	s.Stop()
	if err := s.Restart(); err == nil {
		t.Fatal("Restart after Stop succeeded")
	}
}

func TestAuthAndArrays(t *testing.T) {
	s := Start(t, "--requirepass", "secret")
	if _, err := s.Command("GET", "k"); err == nil || !strings.HasPrefix(err.Error(), "NOAUTH") {
		t.Fatalf("GET without AUTH: %v", err)
	}
	s.SetAuth("default", "secret")
	if _, err := s.Command("RPUSH", "l", "a", "b"); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Command("LRANGE", "l", "0", "-1"); err != nil || got != "a\nb" {
		t.Fatalf("LRANGE = %q, %v", got, err)
	}
}

func TestStartTLS(t *testing.T) {
	s := StartTLS(t)
	conn, err := tls.Dial("tcp", s.TLSAddr, s.ClientConfig)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 7)
	if _, err := io.ReadFull(conn, buf); err != nil || string(buf) != "+PONG\r\n" {
		t.Fatalf("PING over TLS: %q, %v", buf, err)
	}
}

func TestStartSentinel(t *testing.T) {
	s := StartSentinel(t)
	addr, err := s.PrimaryAddr()
	if err != nil || addr != s.Primary.Addr {
		t.Fatalf("primary by Sentinel = %q, %v; want %s", addr, err, s.Primary.Addr)
	}
}
