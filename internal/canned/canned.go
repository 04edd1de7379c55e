// Package canned is a rueidis client for benchmarks of what sluice costs
// in the process: it answers every call of a script with the first reply
// Redis gave to that script, so the Limiter above it does all of its own
// work (key, breaker, timeout, command, decoding) without a round trip,
// nor the allocations of one. Commands other than EVALSHA, EVAL and (in
// DoMulti, where a batch decision sends it ahead of its scripts) TIME go to
// the real client.
package canned

import (
	"context"
	"sync"

	"github.com/redis/rueidis"
)

// Client is a rueidis.Client whose script replies are canned after the
// first success.
type Client struct {
	rueidis.Client
	mu      sync.RWMutex
	replies map[string]rueidis.RedisResult // by SHA1 (EVALSHA) or source (EVAL)
}

// New returns a Client over real.
func New(real rueidis.Client) *Client {
	return &Client{Client: real, replies: map[string]rueidis.RedisResult{}}
}

// Do answers a script call from the canned replies, or asks the real
// client and keeps a successful reply.
func (c *Client) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	args := cmd.Commands()
	if len(args) < 2 || (args[0] != "EVALSHA" && args[0] != "EVAL") {
		return c.Client.Do(ctx, cmd)
	}
	script := args[1] // read before Do: rueidis recycles the command's slice
	c.mu.RLock()
	r, ok := c.replies[script]
	c.mu.RUnlock()
	if ok {
		return r
	}
	r = c.Client.Do(ctx, cmd)
	if r.Error() == nil {
		c.mu.Lock()
		c.replies[script] = r
		c.mu.Unlock()
	}
	return r
}

// DoMulti answers each EVALSHA, EVAL or TIME it has a reply for, and sends
// the others together to the real client, keeping their replies.
func (c *Client) DoMulti(ctx context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
	out := make([]rueidis.RedisResult, len(cmds))
	var send []rueidis.Completed
	var at []int
	var names []string
	for i, cmd := range cmds {
		args := cmd.Commands()
		name := ""
		switch {
		case len(args) >= 2 && (args[0] == "EVALSHA" || args[0] == "EVAL"):
			name = args[1]
		case len(args) == 1 && args[0] == "TIME":
			name = "TIME"
		}
		if name != "" {
			c.mu.RLock()
			r, ok := c.replies[name]
			c.mu.RUnlock()
			if ok {
				out[i] = r
				continue
			}
		}
		send, at, names = append(send, cmd), append(at, i), append(names, name)
	}
	if len(send) == 0 {
		return out
	}
	for j, r := range c.Client.DoMulti(ctx, send...) {
		out[at[j]] = r
		if names[j] != "" && r.Error() == nil {
			c.mu.Lock()
			c.replies[names[j]] = r
			c.mu.Unlock()
		}
	}
	return out
}
