package overrides

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice/overrides/internal/script"
)

// Cache chooses how Lookup keeps the overrides between changes.
type Cache int

const (
	// CacheAuto (the default) uses the client's server-assisted cache when
	// its connections track keys (New asks Redis with CLIENT
	// TRACKINGINFO), and CacheLocal otherwise: rueidis clients made with
	// DisableCache, miniredis, a Redis New could not reach.
	CacheAuto Cache = iota
	// CacheClient uses rueidis' server-assisted client-side cache
	// (DoCache, RESP3 CLIENT TRACKING): Redis tells the client when a
	// policy's overrides change, and a Lookup costs no round trip until
	// then. With a client whose cache is off, every Lookup is a round
	// trip: use it only with a client that caches.
	CacheClient
	// CacheLocal keeps a copy in this process and asks Redis whether it
	// changed at most once per Options.LocalCache per policy: a change
	// takes effect up to LocalCache late.
	CacheLocal
)

// Options configures a Store. Every zero value is a sensible default.
type Options struct {
	// Prefix starts every key (default "sluice", the Limiter's): the
	// overrides of a policy are the hash PREFIX:overrides:{POLICY}, its
	// version the string PREFIX:overrides:{POLICY}:version, and the
	// policies that have some the set PREFIX:overrides (a policy name with
	// a brace, or starting with '#', is '#' and its hex SHA-256 between
	// the braces). It follows sluice.WithPrefix's rule: 1 to 64 printable
	// bytes without braces or spaces.
	Prefix string
	// MaxPerPolicy bounds the overrides of one policy (default 10,000):
	// Set of one more fails with ErrFull.
	MaxPerPolicy int
	// Logger receives every Set and Remove (Info), and Lookup's failures
	// (Warn, at most one line per 10 s); default slog.Default().
	Logger *slog.Logger
	// Cache chooses how Lookup keeps overrides (default CacheAuto).
	Cache Cache
	// LocalCache is how often, at most, a CacheLocal Store asks Redis
	// whether a policy's overrides changed (default 1 s): the bound on how
	// late a change takes effect there.
	LocalCache time.Duration
	// Timeout bounds a Lookup that has to ask Redis (the first one after a
	// change; default 1 s). Past it, or on any error, Lookup answers "no
	// override" and does not ask again for a second.
	Timeout time.Duration
	// Clock is what Until is compared with (default time.Now).
	Clock func() time.Time
}

// DefaultMaxPerPolicy is Options.MaxPerPolicy's default.
const DefaultMaxPerPolicy = 10_000

// clientCacheTTL is the longest rueidis keeps a policy's version without
// hearing from Redis: invalidations end it as soon as the policy changes;
// this only bounds the life of an entry in the client's memory.
const clientCacheTTL = time.Hour

// failBackoff is how long Lookup answers "no override" without asking
// Redis after it failed to.
const failBackoff = time.Second

// Store keeps per-identity overrides in Redis and answers, on every
// decision, whether one applies. It is safe for concurrent use and starts
// no goroutine.
type Store struct {
	client    rueidis.Client
	prefix    string
	index     string // the set of policies that have overrides
	max       int
	log       *slog.Logger
	tracking  bool // CacheClient: rueidis' server-assisted cache
	local     time.Duration
	timeout   time.Duration
	clock     func() time.Time
	realClock bool

	policies atomic.Pointer[map[string]*policyState] // copied on write
	addMu    sync.Mutex
	deadline deadlines
	syncSeq  atomic.Uint64
	failLog  Warner
}

// policyState is what a Store knows of one policy's overrides.
type policyState struct {
	policy string
	key    string // the hash
	vkey   string // its version
	snap   atomic.Pointer[snapshot]
	mu     sync.Mutex // held to refresh snap
	// checked is when a CacheLocal Store last read the version (UnixNano,
	// on the Store's clock); 0 forces a read.
	checked atomic.Int64
	// failedUntil is when Lookup asks Redis again after a failure
	// (UnixNano, on the Store's clock).
	failedUntil atomic.Int64
}

// snapshot is a policy's overrides at one version.
type snapshot struct {
	version string
	m       map[string]Override
}

var empty = &snapshot{}

// New returns a Store over client. With CacheAuto it asks Redis, once,
// whether client's connections track keys for its cache.
func New(client rueidis.Client, opts Options) (*Store, error) {
	if client == nil {
		return nil, errors.New("overrides: New: nil client")
	}
	s := &Store{client: client, prefix: opts.Prefix, max: opts.MaxPerPolicy, log: opts.Logger,
		local: opts.LocalCache, timeout: opts.Timeout, clock: opts.Clock}
	s.failLog.Every = 10 * time.Second
	if s.prefix == "" {
		s.prefix = "sluice"
	}
	if len(s.prefix) > 64 || !plainPrefix(s.prefix) {
		return nil, fmt.Errorf("overrides: Options.Prefix %q: want 1 to 64 printable bytes without braces or spaces", s.prefix)
	}
	switch {
	case s.max < 0:
		return nil, fmt.Errorf("overrides: Options.MaxPerPolicy %d: must not be negative (0: the default, %d)", s.max, DefaultMaxPerPolicy)
	case s.max == 0:
		s.max = DefaultMaxPerPolicy
	}
	switch {
	case s.local < 0:
		return nil, fmt.Errorf("overrides: Options.LocalCache %v: must not be negative (0: the default, 1s)", s.local)
	case s.local == 0:
		s.local = time.Second
	}
	switch {
	case s.timeout < 0:
		return nil, fmt.Errorf("overrides: Options.Timeout %v: must not be negative (0: the default, 1s)", s.timeout)
	case s.timeout == 0:
		s.timeout = time.Second
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.clock == nil {
		s.clock, s.realClock = time.Now, true
	}
	s.index = s.prefix + ":overrides"
	m := map[string]*policyState{}
	s.policies.Store(&m)
	switch opts.Cache {
	case CacheAuto:
		s.tracking = s.tracks()
	case CacheClient:
		s.tracking = true
	case CacheLocal:
	default:
		return nil, fmt.Errorf("overrides: Options.Cache %d: want CacheAuto, CacheClient or CacheLocal", int(opts.Cache))
	}
	return s, nil
}

func plainPrefix(p string) bool {
	for i := 0; i < len(p); i++ {
		if p[i] < 0x21 || p[i] > 0x7e || p[i] == '{' || p[i] == '}' {
			return false
		}
	}
	return true
}

// tracks reports whether client's connections have CLIENT TRACKING on,
// which rueidis turns on for its cache unless DisableCache.
func (s *Store) tracks() bool {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	info, err := s.client.Do(ctx, s.client.B().ClientTrackinginfo().Build()).AsMap()
	if err != nil {
		var rerr *rueidis.RedisError
		if !errors.As(err, &rerr) {
			s.log.Warn("overrides: could not ask Redis whether the client caches; lookups use a local copy refreshed every LocalCache",
				"local_cache", s.local, "err", err)
		}
		return false
	}
	f, ok := info["flags"]
	if !ok {
		return false
	}
	flags, err := f.AsStrSlice()
	return err == nil && slices.Contains(flags, "on")
}

// ClientCache reports whether Lookup uses the client's server-assisted
// cache (else a local copy refreshed every Options.LocalCache).
func (s *Store) ClientCache() bool { return s.tracking }

// keys are the hash of policy's overrides and the key of its version,
// in one cluster slot.
func (s *Store) keys(policy string) (hash, version string) {
	tag := policy
	if strings.ContainsAny(policy, "{}") || strings.HasPrefix(policy, "#") {
		sum := sha256.Sum256([]byte(policy))
		tag = "#" + hex.EncodeToString(sum[:])
	}
	hash = s.prefix + ":overrides:{" + tag + "}"
	return hash, hash + ":version"
}

// state returns policy's state, made on first use.
func (s *Store) state(policy string) *policyState {
	if ps, ok := (*s.policies.Load())[policy]; ok {
		return ps
	}
	s.addMu.Lock()
	defer s.addMu.Unlock()
	old := *s.policies.Load()
	if ps, ok := old[policy]; ok {
		return ps
	}
	m := make(map[string]*policyState, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	ps := &policyState{policy: policy}
	ps.key, ps.vkey = s.keys(policy)
	m[policy] = ps
	s.policies.Store(&m)
	return ps
}

// Lookup returns the override of identity under policy that applies now,
// if any. It is what an Engine calls on every decision (Config.Overrides
// of httplimit and grpclimit), and in steady state it sends Redis
// nothing: with the client's cache, rueidis answers from memory until
// Redis reports a change to the policy's overrides; with a local copy,
// one request per policy and Options.LocalCache asks whether it changed.
// The first Lookup of a policy after a change reads all its overrides
// (one more round trip).
//
// It never fails: when Redis cannot answer within Options.Timeout it
// answers "no override", logs (at most one line per 10 s), and answers
// so without asking for a second. ctx is the request's, and is not
// waited on: Options.Timeout bounds the read, which the requests that
// arrive meanwhile share, so that one request's end does not cut it
// short.
func (s *Store) Lookup(_ context.Context, policy, identity string) (Override, bool) {
	ps := s.state(policy)
	now := s.clock()
	snap := ps.snap.Load()
	if s.tracking || snap == nil || now.UnixNano()-ps.checked.Load() >= int64(s.local) {
		var ok bool
		if snap, ok = s.current(ps, snap, now); !ok {
			return Override{}, false
		}
	}
	o, ok := snap.m[identity]
	if !ok || !o.Active(now) {
		return Override{}, false
	}
	return o, true
}

// current returns policy's snapshot after asking Redis for its version
// (the client's cache answers in steady state), refreshed when the version
// changed; false after a failure.
func (s *Store) current(ps *policyState, snap *snapshot, now time.Time) (*snapshot, bool) {
	if now.UnixNano() < ps.failedUntil.Load() {
		return nil, false
	}
	if !s.tracking {
		// One refresh at a time: the others keep the copy they have.
		if snap != nil {
			if !ps.mu.TryLock() {
				return snap, true
			}
		} else {
			ps.mu.Lock()
		}
		defer ps.mu.Unlock()
		if cur := ps.snap.Load(); cur != snap && cur != nil && now.UnixNano()-ps.checked.Load() < int64(s.local) {
			return cur, true // refreshed while this one waited
		}
	}
	ctx := s.deadline.get(s.realNow(now), s.timeout)
	v, err := s.version(ctx, ps.vkey)
	if err != nil {
		s.failed(ps, now, err)
		return nil, false
	}
	if snap == nil || snap.version != v {
		if snap, err = s.refresh(ctx, ps, v); err != nil {
			s.failed(ps, now, err)
			return nil, false
		}
	}
	if !s.tracking {
		ps.checked.Store(now.UnixNano())
	}
	return snap, true
}

// version reads a policy's version at vkey ("" when it has none):
// through the client's cache when it tracks keys.
func (s *Store) version(ctx context.Context, vkey string) (string, error) {
	var res rueidis.RedisResult
	if s.tracking {
		res = s.client.DoCache(ctx, s.client.B().Get().Key(vkey).Cache(), clientCacheTTL)
	} else {
		res = s.client.Do(ctx, s.client.B().Get().Key(vkey).Build())
	}
	v, err := res.ToString()
	if rueidis.IsRedisNil(err) {
		return "", nil
	}
	return v, err
}

// refresh reads the policy's overrides when its version is not want.
func (s *Store) refresh(ctx context.Context, ps *policyState, want string) (*snapshot, error) {
	if s.tracking {
		ps.mu.Lock()
		defer ps.mu.Unlock()
		if cur := ps.snap.Load(); cur != nil && cur.version == want {
			return cur, nil
		}
	}
	if want == "" {
		ps.snap.Store(empty)
		return empty, nil
	}
	all, err := s.client.Do(ctx, s.client.B().Hgetall().Key(ps.key).Build()).AsStrMap()
	if err != nil {
		return nil, err
	}
	// The hash read may be newer than want: then the next Lookup reads
	// again, once the client has heard of the change.
	snap := &snapshot{version: want, m: make(map[string]Override, len(all))}
	for id, v := range all {
		o, err := decode(ps.policy, id, v)
		if err != nil {
			s.failLog.Warn(s.log, "overrides: an override that cannot be read is ignored", err) // written by a newer version, or by hand
			continue
		}
		snap.m[id] = o
	}
	ps.snap.Store(snap)
	return snap, nil
}

// failed makes Lookup answer "no override" without asking Redis for a
// while, and logs err.
func (s *Store) failed(ps *policyState, now time.Time, err error) {
	ps.failedUntil.Store(now.Add(failBackoff).UnixNano())
	s.failLog.Warn(s.log, "overrides: lookup failed; answering \"no override\" for "+failBackoff.String(), err)
}

func (s *Store) realNow(now time.Time) time.Time {
	if s.realClock {
		return now
	}
	return time.Now()
}

// Sync returns once every change to policy's overrides made before it was
// called has reached this Store, so that the next Lookup obeys it. With
// the client's cache it sends a command on the connection that carries
// the policy's invalidations and waits for its reply, which Redis writes
// after any invalidation it sent before; with a local copy, it drops the
// copy. Lookup does not need it: it is for tests and tools that must know.
func (s *Store) Sync(ctx context.Context, policy string) error {
	if err := checkPolicy(policy); err != nil {
		return err
	}
	ps := s.state(policy)
	if !s.tracking {
		ps.checked.Store(0)
		return nil
	}
	// A read of the version key new each time, so that the call is a miss
	// and goes to Redis on the connection DoCache uses for this key.
	end := -int64(s.syncSeq.Add(1))
	err := s.client.DoCache(ctx, s.client.B().Getrange().Key(ps.vkey).Start(0).End(end).Cache(), time.Millisecond).Error()
	if err != nil && !rueidis.IsRedisNil(err) {
		return fmt.Errorf("overrides: sync %q: %w", policy, err)
	}
	return nil
}

// Set stores o, replacing the override o.Identity had under o.Policy.
// Set fills o.Set from the Store's clock. It fails with ErrInvalid when o
// is not valid and with ErrFull when the policy already holds
// MaxPerPolicy other overrides; either way nothing is written. Expired
// overrides of the policy are swept first. Every Set is logged.
func (s *Store) Set(ctx context.Context, o Override) error {
	now := s.clock()
	if err := o.validate(now); err != nil {
		return err
	}
	o.Set = fromMicros(now.UnixMicro())
	hash, version := s.keys(o.Policy)
	res, err := script.Write.Run(ctx, s.client, script.WriteKeys{Overrides: hash, Version: version},
		script.WriteArgs{Identity: o.Identity, Value: encode(&o), Now: now.UnixMicro(), Max: int64(s.max)})
	if err != nil {
		return fmt.Errorf("overrides: set %q %q: %w", o.Policy, o.Identity, err)
	}
	if res.Status < 0 {
		return fmt.Errorf("%w: policy %q holds %d overrides, the most Options.MaxPerPolicy allows; remove some or raise it",
			ErrFull, o.Policy, res.Count)
	}
	if _, err := script.Index.Run(ctx, s.client, script.IndexKeys{Index: s.index},
		script.IndexArgs{Policy: o.Policy, ExpireAt: res.ExpireAt}); err != nil {
		return fmt.Errorf("overrides: set %q %q: the override is stored, but List(\"\") may not show its policy: %w", o.Policy, o.Identity, err)
	}
	attrs := []any{"policy", o.Policy, "identity", o.Identity, "kind", o.Kind.String(), "until", untilAttr(o.Until), "reason", o.Reason}
	if o.Kind == Limit {
		attrs = append(attrs, "rate", o.Rate, "period", o.Period, "burst", o.Burst)
	}
	if res.Previous != "" {
		attrs = append(attrs, "replaced", true)
	}
	s.log.Info("overrides: set", attrs...)
	return nil
}

// untilAttr is how logs show an Until.
func untilAttr(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// Get returns identity's override under policy as Redis holds it now
// (not the copy Lookup answers from); false when it has none or it has
// expired.
func (s *Store) Get(ctx context.Context, policy, identity string) (Override, bool, error) {
	if err := checkPolicy(policy); err != nil {
		return Override{}, false, err
	}
	if err := checkIdentity(identity); err != nil {
		return Override{}, false, err
	}
	hash, _ := s.keys(policy)
	v, err := s.client.Do(ctx, s.client.B().Hget().Key(hash).Field(identity).Build()).ToString()
	if rueidis.IsRedisNil(err) {
		return Override{}, false, nil
	}
	if err != nil {
		return Override{}, false, fmt.Errorf("overrides: get %q %q: %w", policy, identity, err)
	}
	o, err := decode(policy, identity, v)
	if err != nil {
		return Override{}, false, err
	}
	if !o.Active(s.clock()) {
		return Override{}, false, nil
	}
	return o, true, nil
}

// List returns the overrides of policy, or of every policy when policy is
// "", that have not expired, sorted by policy and identity. It sweeps the
// expired ones of each policy it reads. A value it cannot read (written
// by a newer version, or by hand) is left out and logged.
func (s *Store) List(ctx context.Context, policy string) ([]Override, error) {
	policies := []string{policy}
	if policy == "" {
		var err error
		if policies, err = s.client.Do(ctx, s.client.B().Smembers().Key(s.index).Build()).AsStrSlice(); err != nil {
			return nil, fmt.Errorf("overrides: list: %w", err)
		}
		slices.Sort(policies)
	} else if err := checkPolicy(policy); err != nil {
		return nil, err
	}
	var out []Override
	now := s.clock()
	for _, p := range policies {
		key, version := s.keys(p)
		if _, err := script.Write.Run(ctx, s.client, script.WriteKeys{Overrides: key, Version: version},
			script.WriteArgs{Now: now.UnixMicro(), Max: int64(s.max)}); err != nil {
			return nil, fmt.Errorf("overrides: list %q: %w", p, err)
		}
		all, err := s.client.Do(ctx, s.client.B().Hgetall().Key(key).Build()).AsStrMap()
		if err != nil {
			return nil, fmt.Errorf("overrides: list %q: %w", p, err)
		}
		start := len(out)
		for id, v := range all {
			if id == "" {
				continue
			}
			o, err := decode(p, id, v)
			if err != nil {
				s.log.Warn("overrides: list: value left out", "err", err)
				continue
			}
			if o.Active(now) {
				out = append(out, o)
			}
		}
		slices.SortFunc(out[start:], func(a, b Override) int { return strings.Compare(a.Identity, b.Identity) })
	}
	return out, nil
}

// Remove deletes identity's override under policy. It reports whether
// there was one (an expired one counts as none). Every removal is logged,
// with what was removed.
func (s *Store) Remove(ctx context.Context, policy, identity string) (bool, error) {
	if err := checkPolicy(policy); err != nil {
		return false, err
	}
	if err := checkIdentity(identity); err != nil {
		return false, err
	}
	hash, version := s.keys(policy)
	res, err := script.Write.Run(ctx, s.client, script.WriteKeys{Overrides: hash, Version: version},
		script.WriteArgs{Identity: identity, Now: s.clock().UnixMicro(), Max: int64(s.max)})
	if err != nil {
		return false, fmt.Errorf("overrides: remove %q %q: %w", policy, identity, err)
	}
	if res.Status != 1 {
		return false, nil
	}
	attrs := []any{"policy", policy, "identity", identity}
	if o, err := decode(policy, identity, res.Previous); err == nil {
		attrs = append(attrs, "kind", o.Kind.String(), "until", untilAttr(o.Until), "reason", o.Reason)
	}
	s.log.Info("overrides: removed", attrs...)
	return true, nil
}

// Warner logs a repeated warning at most once per Every, with the count
// of those left out since the last. The Store logs Lookup's failures
// through one (every 10 s); the policy engines log an override that makes
// no valid limit of its policy's through theirs. Its zero value logs
// every warning; it is safe for concurrent use.
type Warner struct {
	Every   time.Duration
	mu      sync.Mutex
	last    time.Time
	dropped int
}

// Warn logs msg and err on log unless a warning was logged less than
// Every ago.
func (w *Warner) Warn(log *slog.Logger, msg string, err error) {
	now := time.Now()
	w.mu.Lock()
	if !w.last.IsZero() && now.Sub(w.last) < w.Every {
		w.dropped++
		w.mu.Unlock()
		return
	}
	dropped := w.dropped
	w.last, w.dropped = now, 0
	w.mu.Unlock()
	log.Warn(msg, "err", err, "suppressed", dropped)
}

// deadlines lends Lookups a context that ends Options.Timeout after it was
// made, made once per Timeout/8 rather than once per call (a Lookup that
// rueidis answers from memory never waits on it).
type deadlines struct{ cur atomic.Pointer[deadlineCtx] }

type deadlineCtx struct {
	context.Context
	cancel     context.CancelFunc // its timer ends it; kept for vet
	reuseUntil int64              // UnixNano
}

// Deadline hides the bound from rueidis, which given a deadline may write
// the call with it on the socket and close the connection (the Limiter's
// too) when it passes; a context that only ends (Done) ends the wait
// alone.
func (c *deadlineCtx) Deadline() (time.Time, bool) { return time.Time{}, false }

func (d *deadlines) get(now time.Time, t time.Duration) context.Context {
	if c := d.cur.Load(); c != nil && now.UnixNano() < c.reuseUntil {
		return c
	}
	slack := t / 8
	ctx, cancel := context.WithTimeout(context.Background(), t+slack)
	c := &deadlineCtx{Context: ctx, cancel: cancel, reuseUntil: now.Add(slack).UnixNano()}
	d.cur.Store(c)
	return c
}
