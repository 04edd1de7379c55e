package verify

import (
	"strconv"
	"strings"
)

// commandKeys returns the key arguments of a command (args[0] is its
// name), following Redis' key specifications for the common commands.
// Commands it does not know are taken to have their first argument as key,
// unless they are known to take none.
func commandKeys(args []string) []string {
	idx := keyIndexes(args)
	keys := make([]string, len(idx))
	for i, j := range idx {
		keys[i] = args[j]
	}
	return keys
}

// keyIndexes returns the positions in args of the key arguments.
func keyIndexes(args []string) []int {
	if len(args) <= 1 {
		return nil
	}
	name := strings.ToUpper(args[0])
	n := len(args)
	span := func(from, to int) []int { // [from, to) clamped to args
		to = min(to, n)
		var out []int
		for i := from; i < to; i++ {
			out = append(out, i)
		}
		return out
	}
	// numkeys reads "numkeys key..." starting at position at.
	numkeys := func(at int) []int {
		if at >= n {
			return nil
		}
		k, err := strconv.Atoi(args[at])
		if err != nil || k < 0 {
			return nil
		}
		return span(at+1, at+1+k)
	}
	if keyless[name] {
		return nil
	}
	switch name {
	case "DEL", "UNLINK", "EXISTS", "TOUCH", "MGET", "WATCH", "SINTER", "SUNION", "SDIFF",
		"PFCOUNT", "PFMERGE", "SINTERSTORE", "SUNIONSTORE", "SDIFFSTORE":
		return span(1, n)
	case "RENAME", "RENAMENX", "COPY", "SMOVE", "RPOPLPUSH", "LMOVE", "BLMOVE", "BRPOPLPUSH",
		"ZRANGESTORE", "GEOSEARCHSTORE":
		return span(1, 3)
	case "BLPOP", "BRPOP", "BZPOPMIN", "BZPOPMAX":
		return span(1, n-1) // the last argument is the timeout
	case "MSET", "MSETNX":
		var out []int
		for i := 1; i < n; i += 2 {
			out = append(out, i)
		}
		return out
	case "BITOP":
		return span(2, n)
	case "ZUNIONSTORE", "ZINTERSTORE", "ZDIFFSTORE":
		return append([]int{1}, numkeys(2)...)
	case "ZUNION", "ZINTER", "ZDIFF", "SINTERCARD", "ZINTERCARD", "LMPOP", "ZMPOP":
		return numkeys(1)
	case "BLMPOP", "BZMPOP":
		return numkeys(2)
	case "OBJECT", "MEMORY", "XGROUP", "XINFO":
		return span(2, 3)
	case "XREAD", "XREADGROUP":
		for i := 1; i < n; i++ {
			if strings.EqualFold(args[i], "STREAMS") {
				return span(i+1, i+1+(n-i-1)/2)
			}
		}
		return nil
	case "SORT", "SORT_RO":
		out := []int{1}
		for i := 2; i+1 < n; i++ {
			if strings.EqualFold(args[i], "STORE") {
				out = append(out, i+1)
			}
		}
		return out
	}
	return []int{1}
}

func firstN(s []string, n int) []string {
	return s[:min(n, len(s))]
}

// keyless are commands that take no key.
var keyless = setOf(
	"PING", "ECHO", "TIME", "INFO", "DBSIZE", "SELECT", "SWAPDB", "FLUSHALL", "FLUSHDB",
	"RANDOMKEY", "KEYS", "SCAN", "PUBLISH", "SPUBLISH", "LASTSAVE", "ROLE", "LOLWUT", "COMMAND",
	"CLUSTER", "READONLY", "READWRITE", "SCRIPT", "FUNCTION", "CONFIG", "CLIENT", "DEBUG",
	"SLOWLOG", "LATENCY", "ACL", "MULTI", "EXEC", "DISCARD", "UNWATCH", "SAVE", "BGSAVE",
	"SHUTDOWN", "WAIT", "AUTH", "HELLO", "QUIT", "RESET", "MONITOR", "SUBSCRIBE", "PSUBSCRIBE",
	"UNSUBSCRIBE", "PUNSUBSCRIBE", "PUBSUB",
)

// writeCommands may create a key or change its content (the key at the
// positions commandKeys returns; for two-key commands, the last key is the
// one written).
var writeCommands = setOf(
	"SET", "SETNX", "SETEX", "PSETEX", "MSET", "MSETNX", "APPEND", "INCR", "INCRBY",
	"INCRBYFLOAT", "DECR", "DECRBY", "GETSET", "SETRANGE", "SETBIT", "BITFIELD", "BITOP",
	"HSET", "HSETNX", "HMSET", "HINCRBY", "HINCRBYFLOAT",
	"LPUSH", "RPUSH", "LPUSHX", "RPUSHX", "LINSERT", "LSET", "RPOPLPUSH", "LMOVE",
	"SADD", "SMOVE", "SINTERSTORE", "SUNIONSTORE", "SDIFFSTORE",
	"ZADD", "ZINCRBY", "ZUNIONSTORE", "ZINTERSTORE", "ZDIFFSTORE", "ZRANGESTORE",
	"PFADD", "PFMERGE", "XADD", "GEOADD", "GEOSEARCHSTORE", "COPY", "RENAME", "RENAMENX",
	"RESTORE", "SORT",
)

// removeCommands change or delete data without creating keys.
var removeCommands = setOf(
	"DEL", "UNLINK", "GETDEL", "HDEL", "LPOP", "RPOP", "LREM", "LTRIM", "LMPOP", "SREM", "SPOP",
	"ZREM", "ZREMRANGEBYSCORE", "ZREMRANGEBYRANK", "ZREMRANGEBYLEX", "ZPOPMIN", "ZPOPMAX", "ZMPOP",
	"XDEL", "XTRIM", "EXPIRE", "PEXPIRE", "EXPIREAT", "PEXPIREAT", "PERSIST", "GETEX",
	"FLUSHALL", "FLUSHDB", "SWAPDB", "MOVE",
)

// isWriteCommand reports whether the named command changes data.
func isWriteCommand(name string) bool {
	name = strings.ToUpper(name)
	return writeCommands[name] || removeCommands[name]
}

// ttlEffect tells how a successful command affects the TTL of the keys it
// writes: ttlSet (it gives them a TTL), ttlClear (it leaves them without
// one) or ttlKeep.
type ttlEffect int

const (
	ttlKeep ttlEffect = iota
	ttlSet
	ttlClear
)

func commandTTL(args []string) ttlEffect {
	name := strings.ToUpper(args[0])
	switch name {
	case "EXPIRE", "PEXPIRE", "EXPIREAT", "PEXPIREAT", "SETEX", "PSETEX":
		return ttlSet
	case "PERSIST", "GETSET", "MSET", "MSETNX":
		return ttlClear
	case "SET", "GETEX":
		for _, a := range args[min(2, len(args)):] {
			switch strings.ToUpper(a) {
			case "EX", "PX", "EXAT", "PXAT":
				return ttlSet
			case "KEEPTTL":
				return ttlKeep // a new key stays without one
			case "PERSIST":
				return ttlClear
			}
		}
		if name == "SET" {
			return ttlClear
		}
	case "RESTORE":
		if len(args) > 2 && args[2] != "0" {
			return ttlSet
		}
		return ttlClear
	}
	return ttlKeep
}

// writtenKeys returns the keys a write command creates or fills.
func writtenKeys(args []string) []string {
	name := strings.ToUpper(args[0])
	if !writeCommands[name] {
		return nil
	}
	keys := commandKeys(args)
	switch name {
	case "RPOPLPUSH", "LMOVE", "SMOVE", "COPY", "RENAME", "RENAMENX", "GEOSEARCHSTORE", "ZRANGESTORE":
		if len(keys) == 2 {
			return keys[1:]
		}
	case "BITOP", "SINTERSTORE", "SUNIONSTORE", "SDIFFSTORE", "ZUNIONSTORE", "ZINTERSTORE", "ZDIFFSTORE", "PFMERGE":
		return firstN(keys, 1)
	case "SORT":
		if len(keys) == 2 {
			return keys[1:]
		}
		return nil
	}
	return keys
}

// forbidden are commands a script should not send, with the reason.
var forbidden = map[string]string{
	"KEYS":        "scans the whole keyspace, touching keys not in KEYS and blocking the server",
	"SCAN":        "touches keys not in KEYS and its results are not deterministic",
	"HSCAN":       "returns fields in no defined order; use HGETALL or HMGET",
	"SSCAN":       "returns members in no defined order",
	"ZSCAN":       "returns members in no defined order; use ZRANGE",
	"RANDOMKEY":   "is not deterministic and touches keys not in KEYS",
	"SRANDMEMBER": "is not deterministic",
	"SPOP":        "is not deterministic",
	"HRANDFIELD":  "is not deterministic",
	"ZRANDMEMBER": "is not deterministic",
	"FLUSHALL":    "deletes keys not in KEYS",
	"FLUSHDB":     "deletes keys not in KEYS",
	"SWAPDB":      "changes keys not in KEYS",
	"SELECT":      "switches database, which Redis Cluster does not support",
	"MOVE":        "moves a key to another database, which Redis Cluster does not support",
	"MIGRATE":     "is not allowed in scripts",
	"DEBUG":       "is not allowed in scripts",
	"CONFIG":      "is not allowed in scripts",
	"SHUTDOWN":    "is not allowed in scripts",
	"CLIENT":      "is not allowed in scripts",
	"MONITOR":     "is not allowed in scripts",
	"SAVE":        "is not allowed in scripts",
	"BGSAVE":      "is not allowed in scripts",
	"SCRIPT":      "is not allowed in scripts",
	"FUNCTION":    "is not allowed in scripts",
	"EVAL":        "is not allowed in scripts",
	"EVALSHA":     "is not allowed in scripts",
	"EVAL_RO":     "is not allowed in scripts",
	"EVALSHA_RO":  "is not allowed in scripts",
	"FCALL":       "is not allowed in scripts",
	"FCALL_RO":    "is not allowed in scripts",
	"MULTI":       "is not allowed in scripts (a script is already atomic)",
	"EXEC":        "is not allowed in scripts (a script is already atomic)",
	"WATCH":       "is not allowed in scripts (a script is already atomic)",
	"SUBSCRIBE":   "is not allowed in scripts",
	"PSUBSCRIBE":  "is not allowed in scripts",
	"SSUBSCRIBE":  "is not allowed in scripts",
	"WAIT":        "is not allowed in scripts",
	"BLPOP":       "blocks, which scripts cannot do",
	"BRPOP":       "blocks, which scripts cannot do",
	"BLMOVE":      "blocks, which scripts cannot do",
	"BRPOPLPUSH":  "blocks, which scripts cannot do",
	"BLMPOP":      "blocks, which scripts cannot do",
	"BZPOPMIN":    "blocks, which scripts cannot do",
	"BZPOPMAX":    "blocks, which scripts cannot do",
	"BZMPOP":      "blocks, which scripts cannot do",
}
