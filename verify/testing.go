package verify

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice/internal/redisserver"
)

// RedisAddrEnv names the environment variable that points tests at an
// existing Redis instead of a throwaway redis-server: host:port or
// redis://host:port/db. The database must be empty; tests empty it again.
const RedisAddrEnv = "SLUICE_REDIS_ADDR"

// Mini is a miniredis server for a test: an Env, a ready rueidis client and
// a settable clock that TIME and TTLs follow.
type Mini struct {
	*MiniredisEnv
	// Client is connected to the server, with the options miniredis needs
	// (DisableCache, ForceSingleClient).
	Client rueidis.Client
}

// RunT starts a miniredis server for the test, with its clock at StartTime,
// and stops it when the test ends.
func RunT(t testing.TB) *Mini {
	t.Helper()
	e, err := NewMiniredis()
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	t.Cleanup(func() { e.Close() })
	c, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress:       []string{e.Addr()},
		DisableCache:      true,
		ForceSingleClient: true,
	})
	if err != nil {
		t.Fatalf("verify: rueidis client for miniredis: %v", err)
	}
	t.Cleanup(c.Close)
	return &Mini{MiniredisEnv: e, Client: c}
}

// SandboxT returns a sandbox closed when the test ends.
func SandboxT(t testing.TB) *Sandbox {
	t.Helper()
	s, err := NewSandbox()
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// RedisT returns a real Redis environment for the test: the server named by
// SLUICE_REDIS_ADDR when set, else a throwaway redis-server on a free
// loopback port (internal/redisserver), stopped when the test ends. Without
// redis-server the test is skipped, or fails when CI=true.
func RedisT(t testing.TB) *RedisEnv {
	t.Helper()
	addr := os.Getenv(RedisAddrEnv)
	if addr == "" {
		addr = redisserver.Start(t).Addr
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e, err := DialRedis(ctx, addr)
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// EnvsT returns the three environments, sandbox first: the sandbox,
// miniredis and a real Redis (see RedisT).
func EnvsT(t testing.TB) []Env {
	t.Helper()
	return []Env{SandboxT(t), RunT(t).MiniredisEnv, RedisT(t)}
}

// CheckStepFile runs the step file of the script at path on envs (by
// default the sandbox and miniredis) and reports every failure and note
// through t.
func CheckStepFile(t testing.TB, path string, envs ...Env) *Report {
	t.Helper()
	if len(envs) == 0 {
		envs = []Env{SandboxT(t), RunT(t).MiniredisEnv}
	}
	rep, err := RunStepFile(context.Background(), path, envs...)
	if err != nil {
		t.Fatalf("%v", err)
	}
	for _, n := range rep.Notes {
		t.Logf("%s: %s", path, n)
	}
	for _, f := range rep.Failures {
		t.Errorf("%s:%d: %s", rep.StepFile, f.Step.Line, f)
	}
	return rep
}
