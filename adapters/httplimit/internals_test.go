package httplimit

import (
	"unicode/utf8"

	"github.com/sluice-go/sluice/adapters/ratepolicy"
)

// The shared model's internals under the names this package's tests use.
var (
	boundKey         = ratepolicy.BoundKey
	lastXFFHops      = ratepolicy.LastXFFHops
	lastForwardedFor = ratepolicy.LastForwardedFor
	parseHop         = ratepolicy.ParseHop
)

const (
	maxHops    = ratepolicy.MaxHops
	maxLiteral = ratepolicy.MaxLiteral
)

// hasControl reports a control character or invalid UTF-8 in s.
func hasControl(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f || r == utf8.RuneError {
			return true
		}
	}
	return false
}
