package redisserver

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Sentinel is a primary, one replica and three Sentinels monitoring them
// (quorum 2) under the master set name MasterSet.
type Sentinel struct {
	Primary   *Server
	Replica   *Server
	Sentinels []*Server
	MasterSet string
}

// Addrs lists the Sentinels' addresses (what a client's InitAddress takes).
func (s *Sentinel) Addrs() []string {
	out := make([]string, len(s.Sentinels))
	for i, n := range s.Sentinels {
		out[i] = n.Addr
	}
	return out
}

// PrimaryAddr asks the first Sentinel that answers for the current
// primary's host:port.
func (s *Sentinel) PrimaryAddr() (string, error) {
	var lastErr error
	for _, n := range s.Sentinels {
		reply, err := n.Command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", s.MasterSet)
		if err != nil {
			lastErr = err
			continue
		}
		if hp := strings.Split(reply, "\n"); len(hp) == 2 {
			return hp[0] + ":" + hp[1], nil
		}
		lastErr = fmt.Errorf("unexpected reply %q", reply)
	}
	return "", lastErr
}

// SentinelDownAfter is how long the Sentinels wait for a silent primary
// before they agree it is down and fail over.
const SentinelDownAfter = 1500 * time.Millisecond

// StartSentinel starts a primary, a replica of it and three Sentinels
// (each "redis-server FILE.conf --sentinel" with its own config file), and
// waits until every Sentinel knows the replica and the other two Sentinels,
// so that killing the primary leads to a failover. Everything is stopped
// when the test ends.
func StartSentinel(t testing.TB) *Sentinel {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		unavailable(t, "redis-server not found: %v", err)
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		s, err := startSentinel(t, bin)
		if err == nil {
			return s
		}
		lastErr = err
	}
	unavailable(t, "cannot start a Sentinel setup: %v", lastErr)
	return nil
}

func startSentinel(t testing.TB, bin string) (*Sentinel, error) {
	t.Helper()
	st := &Sentinel{MasterSet: "mymaster"}
	spawnAt := func(port int, writeConfig func(string) (string, error), extra ...string) (*Server, error) {
		s, err := spawn(bin, port, writeConfig, extra, nil)
		if err != nil {
			return nil, err
		}
		t.Cleanup(s.Stop)
		return s, nil
	}
	start := func(writeConfig func(string) (string, error), extra ...string) (*Server, error) {
		port, err := freePort(false)
		if err != nil {
			return nil, err
		}
		return spawnAt(port, writeConfig, extra...)
	}
	var err error
	// The primary sends the replica its first sync at once: by default it
	// waits repl-diskless-sync-delay (5 s) for more replicas to join.
	if st.Primary, err = start(nil, "--repl-diskless-sync-delay", "0"); err != nil {
		return nil, err
	}
	if st.Replica, err = start(nil, "--replicaof", "127.0.0.1", strconv.Itoa(st.Primary.Port)); err != nil {
		return nil, err
	}
	// Each Sentinel is told the replica and the other two (their ports
	// and IDs, chosen here) in its config, as a Sentinel that had found
	// them would have written it: otherwise finding them takes the hello
	// messages of several seconds.
	const sentinels = 3
	var ports [sentinels]int
	var ids [sentinels]string
	for i := range ports {
		if ports[i], err = freePort(false); err != nil {
			return nil, err
		}
		if slices.Contains(ports[:i], ports[i]) {
			return nil, fmt.Errorf("port %d picked twice", ports[i]) // the caller tries again
		}
		var b [20]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, err
		}
		ids[i] = hex.EncodeToString(b[:])
	}
	common := fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 2\n"+
		"sentinel down-after-milliseconds %[1]s %[3]d\n"+
		"sentinel failover-timeout %[1]s 10000\n"+
		"sentinel parallel-syncs %[1]s 1\n"+
		"sentinel known-replica %[1]s 127.0.0.1 %[4]d\n", st.MasterSet, st.Primary.Port, SentinelDownAfter.Milliseconds(), st.Replica.Port)
	for i := range sentinels {
		conf := "sentinel myid " + ids[i] + "\n" + common
		for j := range sentinels {
			if j != i {
				conf += fmt.Sprintf("sentinel known-sentinel %s 127.0.0.1 %d %s\n", st.MasterSet, ports[j], ids[j])
			}
		}
		s, err := spawnAt(ports[i], func(dir string) (string, error) {
			path := filepath.Join(dir, "sentinel.conf") // Sentinel rewrites it: one per Sentinel
			return path, os.WriteFile(path, []byte(conf), 0o600)
		}, "--sentinel")
		if err != nil {
			return nil, err
		}
		st.Sentinels = append(st.Sentinels, s)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var last string
		ready := true
		if info, err := st.Replica.Command("INFO", "replication"); err != nil || !strings.Contains(info, "master_link_status:up") {
			ready, last = false, fmt.Sprintf("replica: %q %v", info, err)
		}
		for _, s := range st.Sentinels {
			info, err := s.Command("INFO", "sentinel")
			if err != nil || !strings.Contains(info, "status=ok") || !strings.Contains(info, "slaves=1,sentinels=3") {
				ready, last = false, fmt.Sprintf("sentinel %s: %q %v", s.Addr, info, err)
			}
		}
		if ready {
			return st, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("sentinels not ready within 30s: %s", last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
