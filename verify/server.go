package verify

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Server names the server a Sandbox answers as where Redis-compatible
// servers differ for a script: how a Lua number passed to redis.call is
// written (and so what the script stores), and the text of some errors.
// The zero Server is Redis70.
type Server string

// The servers a Sandbox can answer as. What each does was read from its
// source (script_lua.c, script.c, util.c's double2ll, deps/fpconv) and is
// pinned by golden outputs in server_test.go.
const (
	// Redis70 is Redis 7.0 (Debian 12's): a number is written with
	// %.17g (0.1 → "0.10000000000000001", 1e17 → "1e+17", -0 → "-0").
	Redis70 Server = "redis7.0"
	// Redis72 is Redis 7.2: the shortest form that reads back as the same
	// number (0.1 → "0.1"), integers of 18 digits or more in exponent
	// form (1e17 → "1e+17"), -0 → "-0"; errors as 7.0.
	Redis72 Server = "redis7.2"
	// Redis74 is Redis 7.4 and later: an integral number within ±2^62 as
	// an integer (1e17 → "100000000000000000", -0 → "0"), others in the
	// shortest form (1e20 → "1e+20"); "Invalid log level.".
	Redis74 Server = "redis7.4"
	// Valkey8 is Valkey 8: numbers as Redis74; its own error texts
	// ("Command arguments must be strings or integers", "Unknown command
	// called from script", ...).
	Valkey8 Server = "valkey8"
)

// Servers lists every Server, oldest first.
var Servers = []Server{Redis70, Redis72, Redis74, Valkey8}

// ParseServer reads a server name as luagen test -server takes it.
func ParseServer(s string) (Server, error) {
	for _, sv := range Servers {
		if strings.EqualFold(s, string(sv)) {
			return sv, nil
		}
	}
	names := make([]string, len(Servers))
	for i, sv := range Servers {
		names[i] = string(sv)
	}
	return "", fmt.Errorf("verify: unknown server %q: want one of %s", s, strings.Join(names, ", "))
}

// ServerOf is the Server that answers like a server reporting name and
// version in HELLO ("redis" or "valkey"; INFO's redis_version cannot tell,
// Valkey reports 7.2.4 there).
func ServerOf(name, version string) Server {
	if strings.EqualFold(name, "valkey") {
		return Valkey8
	}
	major, minor := 0, 0
	parts := strings.SplitN(version, ".", 3)
	if len(parts) >= 2 {
		major, _ = strconv.Atoi(parts[0])
		minor, _ = strconv.Atoi(parts[1])
	}
	switch {
	case major > 7 || major == 7 && minor >= 4:
		return Redis74
	case major == 7 && minor >= 2:
		return Redis72
	}
	return Redis70
}

func (s Server) orDefault() Server {
	if s == "" {
		return Redis70
	}
	return s
}

// formatNumber writes a Lua number the way s does when a script passes it
// to redis.call.
func (s Server) formatNumber(f float64) string {
	switch s.orDefault() {
	case Redis70:
		return formatG(f, 17)
	case Redis74, Valkey8:
		// double2ll: integral and within ±(2^63-1)/2, as an integer.
		const half = float64(math.MaxInt64 / 2)
		if f >= -half && f <= half && f == math.Trunc(f) {
			return strconv.FormatInt(int64(f), 10)
		}
	}
	return fpconvDtoa(f)
}

// fpconvDtoa is deps/fpconv's fpconv_dtoa (Redis ≥ 7.2, Valkey): the
// shortest digits that read back as f, written plain when the exponent is
// small and in exponent form otherwise. (fpconv finds the digits with
// Grisu2, which in rare cases gives one digit more than the shortest that
// strconv finds here.)
func fpconvDtoa(f float64) string {
	neg := math.Signbit(f)
	sign := ""
	if neg {
		sign = "-"
	}
	switch {
	case f == 0:
		return sign + "0"
	case math.IsNaN(f):
		return sign + "nan"
	case math.IsInf(f, 0):
		return sign + "inf"
	}
	e := strconv.FormatFloat(math.Abs(f), 'e', -1, 64) // d.ddde±XX
	mant, exps, _ := strings.Cut(e, "e")
	digits := strings.Replace(mant, ".", "", 1)
	exp10, _ := strconv.Atoi(exps)
	nd := len(digits)
	k := exp10 - (nd - 1) // value = digits × 10^k
	exp := exp10
	if exp < 0 {
		exp = -exp
	}
	switch {
	case k >= 0 && exp < nd+7:
		return sign + digits + strings.Repeat("0", k)
	case k < 0 && (k > -7 || exp < 4):
		offset := nd + k
		if offset <= 0 {
			return sign + "0." + strings.Repeat("0", -offset) + digits
		}
		return sign + digits[:offset] + "." + digits[offset:]
	}
	nd = min(nd, 18)
	if neg {
		nd = min(nd, 17)
	}
	out := sign + digits[:1]
	if nd > 1 {
		out += "." + digits[1:nd]
	}
	if exp10 < 0 {
		return out + "e-" + strconv.Itoa(exp)
	}
	return out + "e+" + strconv.Itoa(exp)
}

// The error texts that differ between servers.
type serverText int

const (
	textNoArgs serverText = iota
	textBadArg
	textUnknownCommand
	textLogLevel
	textLogArgs
)

func (s Server) text(t serverText) string {
	valkey, logLevel := s.orDefault() == Valkey8, s.orDefault() == Redis74 || s.orDefault() == Valkey8
	switch t {
	case textNoArgs:
		if valkey {
			return "ERR Please specify at least one argument for this call"
		}
		return "ERR Please specify at least one argument for this redis lib call"
	case textBadArg:
		if valkey {
			return "ERR Command arguments must be strings or integers"
		}
		return "ERR Lua redis lib command arguments must be strings or integers"
	case textUnknownCommand:
		if valkey {
			return "ERR Unknown command called from script"
		}
		return "ERR Unknown Redis command called from script"
	case textLogLevel:
		if logLevel {
			return "ERR Invalid log level."
		}
		return "ERR Invalid debug level."
	default:
		if valkey {
			return "ERR server.log() requires two arguments or more."
		}
		return "ERR redis.log() requires two arguments or more."
	}
}
