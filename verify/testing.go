package verify

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice/internal/redisserver"
)

// Tester is what the test helpers (RunT, SandboxT, RedisT, EnvsT,
// CheckStepFile) need of a test: *testing.T, *testing.B and *testing.F
// have these methods. When t also has Helper(), the helpers call it; when
// it has Skipf, RedisT skips with it where it would otherwise fail.
type Tester interface {
	Cleanup(func())
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Logf(format string, args ...any)
}

func helper(t Tester) {
	if h, ok := t.(interface{ Helper() }); ok {
		h.Helper()
	}
}

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
func RunT(t Tester) *Mini {
	helper(t)
	e, err := NewMiniredis()
	if err != nil {
		t.Fatalf("%v", err)
		return nil
	}
	t.Cleanup(func() { e.Close() })
	c, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress:       []string{e.Addr()},
		DisableCache:      true,
		ForceSingleClient: true,
	})
	if err != nil {
		e.Close()
		t.Fatalf("verify: rueidis client for miniredis: %v", err)
		return nil
	}
	t.Cleanup(c.Close)
	return &Mini{MiniredisEnv: e, Client: c}
}

// SandboxT returns a sandbox closed when the test ends.
func SandboxT(t Tester) *Sandbox {
	helper(t)
	s, err := NewSandbox()
	if err != nil {
		t.Fatalf("%v", err)
		return nil
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// RedisT returns a real Redis environment for the test: the server named by
// SLUICE_REDIS_ADDR when set, else a throwaway redis-server started on a
// free loopback port and stopped by its PID when the test ends. Without
// redis-server the test is skipped, with a message saying why, or fails
// when the CI environment variable is "true".
func RedisT(t Tester) *RedisEnv {
	helper(t)
	addr := os.Getenv(RedisAddrEnv)
	if addr == "" {
		s, err := redisserver.New()
		if err != nil {
			msg := fmt.Sprintf("verify: no real Redis: %v", err)
			if sk, ok := t.(interface{ Skipf(string, ...any) }); ok && os.Getenv("CI") != "true" {
				sk.Skipf("%s; skipping (install redis-server, or set %s)", msg, RedisAddrEnv)
			}
			t.Fatalf("%s (CI=true: a real Redis is required)", msg)
			return nil
		}
		t.Cleanup(s.Stop)
		addr = s.Addr
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e, err := DialRedis(ctx, addr)
	if err != nil {
		t.Fatalf("%v", err)
		return nil
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// EnvsT returns the three environments, sandbox first: the sandbox,
// miniredis and a real Redis (see RedisT).
func EnvsT(t Tester) []Env {
	helper(t)
	return []Env{SandboxT(t), RunT(t).MiniredisEnv, RedisT(t)}
}

// CheckStepFile runs the step file of the script at path on envs (by
// default the sandbox and miniredis) and reports every failure (Errorf)
// and note (Logf) through t.
func CheckStepFile(t Tester, path string, envs ...Env) *Report {
	helper(t)
	if len(envs) == 0 {
		envs = []Env{SandboxT(t), RunT(t).MiniredisEnv}
	}
	rep, err := RunStepFile(context.Background(), path, envs...)
	if err != nil {
		t.Fatalf("%v", err)
		return nil
	}
	for _, n := range rep.Notes {
		t.Logf("%s: %s", path, n)
	}
	for _, f := range rep.Failures {
		t.Errorf("%s:%d: %s", rep.StepFile, f.Step.Line, f)
	}
	return rep
}
