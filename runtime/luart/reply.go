package luart

import (
	"strings"

	"github.com/redis/rueidis"
)

// Reply is the reply to one call, from whichever client sent it: what
// rueidis returned (FromRueidis), or the value another client read off the
// wire (FromValue), such as go-redis' Cmd.Result. Generated DecodeReply
// methods read either; Decode is DecodeReply of FromRueidis.
//
// A Reply is a small value: building one does not allocate.
type Reply struct {
	res   rueidis.RedisResult
	val   any
	err   error
	value bool // val and err hold the reply
}

// FromRueidis is a rueidis result as a Reply.
func FromRueidis(r rueidis.RedisResult) Reply { return Reply{res: r} }

// FromValue is a reply another client decoded: err is the call's error (an
// error reply of the server, or the client's own failure), else v is the
// reply as Go values: nil, int64, string, bool, float64, an error (an
// error reply inside an array), or a []any of those. These are the values
// go-redis v9 returns from Cmd.Result, under RESP2 and RESP3 alike.
func FromValue(v any, err error) Reply { return Reply{val: v, err: err, value: true} }

// Err is the reply's error, nil when the call was answered with a value
// (a nil reply too, from every client).
func (r Reply) Err() error {
	if r.value {
		return r.err
	}
	err := r.res.Error()
	if rueidis.IsRedisNil(err) {
		return nil
	}
	return err
}

// IsNoScript reports whether the call failed because the server does not
// have the script (NOSCRIPT): send the call once more as EVAL.
func (r Reply) IsNoScript() bool {
	if !r.value {
		return isNoScript(r.res)
	}
	return r.err != nil && strings.HasPrefix(r.err.Error(), "NOSCRIPT")
}
