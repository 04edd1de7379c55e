// Package redisurl reads the -redis flag of sluice's commands and examples
// into rueidis client options: a redis://, rediss:// (TLS) or unix:// URL,
// with an ACL user and password before the host, more cluster seeds as
// ?addr=host:port and a Sentinel master as ?master_set=NAME, or a
// comma-separated list of host:port.
package redisurl

import (
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/redis/rueidis"
)

// Parse turns s into client options. A host:port list without a host
// ("":6379) means 127.0.0.1.
func Parse(s string) (rueidis.ClientOption, error) {
	if strings.TrimSpace(s) == "" {
		return rueidis.ClientOption{}, errors.New("-redis is empty: want redis://HOST:PORT (or host:port)")
	}
	if strings.Contains(s, "://") {
		opt, err := rueidis.ParseURL(s)
		if err != nil {
			return opt, fmt.Errorf("-redis %q: %w", redact(s), err)
		}
		return opt, nil
	}
	var opt rueidis.ClientOption
	for _, a := range strings.Split(s, ",") {
		a = strings.TrimSpace(a)
		host, port, err := net.SplitHostPort(a)
		if err != nil || port == "" {
			return opt, fmt.Errorf("-redis %q: %q is not host:port (or use a redis:// URL)", s, a)
		}
		if host == "" {
			a = net.JoinHostPort("127.0.0.1", port)
		}
		opt.InitAddress = append(opt.InitAddress, a)
	}
	return opt, nil
}

// redact hides the password of a URL for error messages.
func redact(s string) string {
	i := strings.Index(s, "://")
	at := strings.LastIndex(s, "@")
	if i < 0 || at < i {
		return s
	}
	userinfo := s[i+3 : at]
	if c := strings.IndexByte(userinfo, ':'); c >= 0 {
		return s[:i+3] + userinfo[:c] + ":xxxxx" + s[at:]
	}
	return s
}

// IsDialError reports whether err is a failure to open a connection to
// Redis (refused, timed out, no route, unknown host), as opposed to a
// connection that opened and then failed (a wrong password, a TLS
// mismatch, a peer that is not Redis).
func IsDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}
